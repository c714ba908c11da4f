package redlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// Locks "a" and "{a}" are two locks (two keys, held at once by two
// leases) whose fencing counter is one: hashtag.Beside wraps an untagged
// key in a tag and keeps a tagged one's, so both count in "{a}:fencing"
// (harmless: it only grows). Their token records are two
// ("{a}:fencing-token-untagged" and "{a}:fencing-token"), so each lease's
// Inspect shows its holder's token once both are written; one record
// would hold the later acquisition's alone, and Inspect("a") would show 0.
func TestInspectShowsTheTokenOfTwoLocksWhoseNamesShareATag(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	// Nodes 1 and 2 answer acquisitions a little later than node 0, so
	// that node 0's counter issues both tokens (as it does most of the
	// time anyway: the lowest node among the first to grant).
	l := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
		if i == 0 {
			return n
		}
		return &hookNode{Node: n, beforeScript: func(_ context.Context, keys []string, _ []any) error {
			if len(keys) > 1 && strings.HasSuffix(keys[1], ":fencing") {
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		}}
	}), &redlock.Options{Fencing: true})

	plain, err := l.TryLock(ctx, "a", 10*time.Second)
	require.NoError(t, err)
	tagged, err := l.TryLock(ctx, "{a}", 10*time.Second)
	require.NoError(t, err, "another lock")
	drain(t, l) // both records written

	for _, lease := range []*redlock.Lease{tagged, plain} {
		in, err := l.Inspect(ctx, lease.Key())
		require.NoError(t, err)
		require.Equal(t, lease.Value(), in.Holder, lease.Key())
		assert.Equal(t, lease.Token(), in.Token, "Inspect(%q) shows its holder's token", lease.Key())
	}
}
