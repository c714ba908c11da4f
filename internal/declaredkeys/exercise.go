package declaredkeys

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/fence"
	"github.com/redlock/redlock/redlock"
)

// RepoScripts are the sources of every .lua file under root (the
// repository), by path.
func RepoScripts(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".lua") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(path)] = string(src)
		}
		return nil
	}))
	require.NotEmpty(t, out)
	return out
}

// Exercise runs, on nodes (three or more, new), every operation that
// sends a script: the guard's examination and both trusts; a fenced
// acquisition on the fast path (its token record) and one whose counters
// disagree (phase 2), extend, check, inspect; a waiter joining the key's
// line and the release naming it; resume and revoke; a multi-key lease's
// acquisition with phase 2, extension, check and release; and the fence
// package's scripts. Each must succeed: a script that touched an
// undeclared key fails on every node, and so the operation.
func Exercise(t *testing.T, nodes []*Node) {
	ctx := t.Context()
	all := make([]redlock.Node, len(nodes))
	for i, n := range nodes {
		all[i] = n
	}
	locker := func() *redlock.Locker {
		l, err := redlock.New(all, &redlock.Options{Fencing: true, NodeTimeout: 2 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Drain(context.Background()) })
		return l
	}
	apart := func(counter string) { // counters that disagree: the next fenced acquisition runs phase 2
		for i, n := range nodes {
			require.NoError(t, n.Client.Set(ctx, counter, strconv.Itoa(100*(i+1)), 0).Err())
		}
	}
	l := locker()
	_, err := l.TrustNewNodes(ctx) // examine.lua, and trust.lua on a condition
	require.NoError(t, err)
	require.NoError(t, l.TrustNodes(ctx)) // trust.lua

	fast, err := l.TryLock(ctx, "dk:fast", time.Minute) // acquire.lua (fenced), record.lua
	require.NoError(t, err)
	require.NoError(t, l.Drain(ctx))
	require.NoError(t, fast.Unlock(ctx))

	apart("{dk:k}:fencing")
	lease, err := l.TryLock(ctx, "dk:k", time.Minute) // acquire.lua (fenced), fence.lua
	require.NoError(t, err)
	require.NoError(t, lease.Extend(ctx, time.Minute)) // extend.lua
	require.NoError(t, lease.Check(ctx))               // check.lua
	_, err = l.Inspect(ctx, "dk:k")                    // inspect.lua
	require.NoError(t, err)

	// A waiter joins the key's line (join.lua); the Unlock pops it and
	// names its turn (release.lua).
	waiter := locker()
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		next, err := waiter.Lock(wctx, "dk:k", time.Minute)
		if err == nil {
			err = next.Unlock(ctx)
		}
		waited <- err
	}()
	require.Eventually(t, func() bool {
		return nodes[0].Client.Exists(ctx, "{dk:k}:redlock-waiters").Val() == 1
	}, 5*time.Second, 5*time.Millisecond, "the waiter joined the line")
	require.NoError(t, lease.Unlock(ctx))
	require.NoError(t, <-waited)

	held, err := l.TryLock(ctx, "dk:k", time.Minute)
	require.NoError(t, err)
	again, err := l.Resume(ctx, held.Handle()) // resume.lua
	require.NoError(t, err)
	_, err = l.Revoke(ctx, "dk:k") // revoke.lua
	require.NoError(t, err)
	require.ErrorIs(t, again.Extend(ctx, time.Minute), redlock.ErrNotHeld)

	apart("{dk:m}a:fencing")
	multi, err := l.TryLockMulti(ctx, []string{"{dk:m}a", "{dk:m}b"}, time.Minute) // acquire.lua and fence.lua over two keys
	require.NoError(t, err)
	require.NoError(t, multi.Extend(ctx, time.Minute)) // extend.lua over two keys
	require.NoError(t, multi.Check(ctx))               // check.lua over two keys
	require.NoError(t, multi.Unlock(ctx))              // release.lua over two keys

	g := fence.NewRedis(nodes[0]) // fence's set.lua and get.lua
	require.NoError(t, g.Set(ctx, "{dk:resource}", "v", multi.Token()))
	_, _, err = g.Get(ctx, "{dk:resource}", multi.Token())
	require.NoError(t, err)
	require.NoError(t, l.Drain(ctx))
	require.NoError(t, waiter.Drain(ctx))
}

// RequireEveryScriptRan fails t for each of files (RepoScripts) that ran
// on none of nodes under the check: an operation that sends it is missing
// from Exercise.
func RequireEveryScriptRan(t testing.TB, files map[string]string, nodes []*Node) {
	t.Helper()
	ran := map[string]int{}
	for _, d := range nodes {
		for src, n := range d.Ran() {
			ran[src] += n
		}
	}
	for path, src := range files {
		n := ran[src]
		for other, m := range ran { // the guard's examination runs with a nonce after its source
			if other != src && strings.HasPrefix(other, src) {
				n += m
			}
		}
		assert.Positive(t, n, "%s never ran under the declared-keys check: add the operation that sends it to declaredkeys.Exercise", path)
	}
}

// Sources are the files' sources, for NewNode.
func Sources(files map[string]string) []string {
	out := make([]string, 0, len(files))
	for _, src := range files {
		out = append(out, src)
	}
	return out
}
