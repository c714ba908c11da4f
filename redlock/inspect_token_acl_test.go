package redlock_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock"
)

// recipeCommands are the commands docs/operations.md's least-privilege ACL
// user may run ("+set +get ..."), read from the recipe itself.
func recipeCommands(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^ACL SETUSER app reset .*$`).FindString(string(doc))
	require.NotEmpty(t, line, "docs/operations.md has no ACL recipe")
	allowed := map[string]bool{}
	for _, f := range strings.Fields(line) {
		if c, ok := strings.CutPrefix(f, "+"); ok {
			allowed[c] = true
		}
	}
	return allowed
}

// aclNodes are the cluster's nodes as the recipe's user sees them: a
// command the recipe does not allow is refused as Redis refuses it
// (NOPERM). Scripts' own calls are not checked (the recipe allows what
// they call).
func aclNodes(t *testing.T, c *cluster) []redlock.Node {
	allowed := recipeCommands(t)
	return c.nodes(func(_ int, n redlock.Node) redlock.Node {
		return &hookNode{Node: n, beforeDo: func(_ context.Context, args []any) error {
			name, _ := args[0].(string)
			name = strings.ToLower(name)
			if sub, ok := args[1].(string); ok && (name == "script" || name == "config" || name == "client") {
				name += "|" + strings.ToLower(sub)
			}
			if !allowed[name] {
				return redistest.ServerError(fmt.Sprintf("NOPERM User app has no permissions to run the '%s' command", name))
			}
			return nil
		}}
	})
}

// Inspect shows a fenced lease's token (Inspection.Token, the one
// Lease.TokenOf reports for the key) for a Locker whose user is the least-
// privilege one docs/operations.md gives, which it says is all the library
// needs, Inspect and fencing included: the token record goes by a script
// (record.lua), whose calls the recipe allows, for a single-key lease and
// a multi-key one alike. A record by a command the recipe lacks (MSET,
// say) would be refused on every node, unseen, since nothing waits for it.
func TestInspectShowsAMultiKeyLeasesTokenWithTheLeastPrivilegeACL(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	l := newLocker(t, aclNodes(t, c), &redlock.Options{Fencing: true})

	single, err := l.TryLock(ctx, "lock:one", 10*time.Second)
	require.NoError(t, err)
	drain(t, l) // the record, sent unawaited, has been answered
	in, err := l.Inspect(ctx, "lock:one")
	require.NoError(t, err)
	require.Equal(t, single.Value(), in.Holder)
	require.Equal(t, single.Token(), in.Token, "control: a single-key lease's token, recorded by SET")

	multi, err := l.TryLockMulti(ctx, []string{"lock:a", "lock:b"}, 10*time.Second)
	require.NoError(t, err)
	drain(t, l)
	for _, k := range multi.Keys() {
		in, err := l.Inspect(ctx, k)
		require.NoError(t, err)
		require.Equal(t, multi.Value(), in.Holder, k)
		assert.Equal(t, multi.TokenOf(k), in.Token, "Inspect(%q) shows the holder's token", k)
	}
}
