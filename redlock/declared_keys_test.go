package redlock_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/fence"
	"github.com/redlock/redlock/internal/declaredkeys"
	"github.com/redlock/redlock/redlock"
)

// repoScripts are the sources of every .lua file in the repository.
func repoScripts(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := ".."
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
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

// Every script the library runs touches only the keys it was given in
// KEYS: each operation that sends a script runs here on nodes that check
// every command's keys against KEYS (declaredkeys.Prelude), and each .lua
// file of the repository must have run so, so that a script added later is
// covered or this test names it. A violation fails the operation, since
// every node refuses it.
func TestEveryScriptDeclaresItsKeys(t *testing.T) {
	ctx := t.Context()
	files := repoScripts(t)
	var sources []string
	for _, src := range files {
		sources = append(sources, src)
	}
	c := newCluster(t, 3)
	var checked []*declaredkeys.Node
	nodes := c.nodes(func(_ int, n redlock.Node) redlock.Node {
		d := declaredkeys.NewNode(n.(*redis.Client), sources)
		checked = append(checked, d)
		return d
	})
	l := newLocker(t, nodes, &redlock.Options{Fencing: true})
	_, err := l.TrustNewNodes(ctx) // examine.lua, and trust.lua on a condition
	require.NoError(t, err)
	require.NoError(t, l.TrustNodes(ctx)) // trust.lua

	fast, err := l.TryLock(ctx, "fast", time.Minute) // acquire_fenced.lua, record.lua (the fast path's token record)
	require.NoError(t, err)
	drain(t, l)
	require.NoError(t, fast.Unlock(ctx))
	defer redlock.FencingPhase2("always")() // phase 2's scripts from here on

	lease, err := l.TryLock(ctx, "k", time.Minute) // acquire_fenced.lua, fence.lua
	require.NoError(t, err)
	require.NoError(t, lease.Extend(ctx, time.Minute)) // extend.lua
	require.NoError(t, lease.Check(ctx))               // check.lua
	_, err = l.Inspect(ctx, "k")                       // inspect.lua
	require.NoError(t, err)

	// A waiter joins the key's line (join.lua); the Unlock pops it and
	// names its turn (release.lua).
	waiter := newLocker(t, nodes, &redlock.Options{Fencing: true})
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		next, err := waiter.Lock(wctx, "k", time.Minute)
		if err == nil {
			err = next.Unlock(ctx)
		}
		waited <- err
	}()
	require.Eventually(t, func() bool { return c.servers[0].Exists("{k}:redlock-waiters") }, 5*time.Second, 5*time.Millisecond, "the waiter joined the line")
	require.NoError(t, lease.Unlock(ctx))
	require.NoError(t, <-waited)

	resumed, err := l.TryLock(ctx, "k", time.Minute)
	require.NoError(t, err)
	again, err := l.Resume(ctx, resumed.Handle()) // resume.lua
	require.NoError(t, err)
	_, err = l.Revoke(ctx, "k") // revoke.lua
	require.NoError(t, err)
	require.ErrorIs(t, again.Extend(ctx, time.Minute), redlock.ErrNotHeld)

	multi, err := l.TryLockMulti(ctx, []string{"{m}a", "{m}b"}, time.Minute) // acquire_multi.lua, fence_multi.lua
	require.NoError(t, err)
	require.NoError(t, multi.Extend(ctx, time.Minute)) // extend_multi.lua
	require.NoError(t, multi.Check(ctx))               // check_multi.lua
	require.NoError(t, multi.Unlock(ctx))              // release_multi.lua

	g := fence.NewRedis(nodes[0].(*declaredkeys.Node)) // fence's set.lua and get.lua
	require.NoError(t, g.Set(ctx, "resource", "v", multi.Token()))
	_, _, err = g.Get(ctx, "resource", multi.Token())
	require.NoError(t, err)
	drain(t, l)
	drain(t, waiter)

	ran := map[string]int{}
	for _, d := range checked {
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
		assert.Positive(t, n, "%s never ran under the declared-keys check: add the operation that sends it", path)
	}
}
