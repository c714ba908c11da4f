package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
)

// A rolling upgrade of five nodes of mixed versions (2 × Redis 7.0, 2 ×
// Redis 8.0, 1 × Valkey 8.1, all with AOF), one node at a time, as an
// operator would do it, while three clients keep locking one key with
// fencing:
//   - the Redis 7.0 nodes are stopped and Redis 8.0 started on the same
//     data directory (8.0 loads 7.0's AOF, locks and counters included);
//   - the Redis 8.0 nodes are stopped, kept out for longer than the TTL (so
//     that every lock they granted has expired), and Valkey 8.1 started
//     empty (Valkey 8.1 does not read Redis 8.0's RDB format);
//   - the Valkey node is restarted on its own data.
//
// Holders never overlap, every holder's token is above the one before, the
// clients make progress after each step, and once the last TTL has passed no
// lock key is left on any node.
func TestRollingUpgrade(t *testing.T) {
	ctx := t.Context()
	const ttl = 2 * time.Second
	c := harness.Start(t, harness.Options{
		Servers:    []string{"redis:7.0", "redis:7.0", "redis:8.0", "redis:8.0", "valkey:8.1"},
		Persistent: true,
	})

	var (
		inside    atomic.Int32 // holders inside the critical section now
		overlaps  atomic.Int32
		acquired  atomic.Int64
		failures  atomic.Int64
		mu        sync.Mutex
		lastToken uint64
		regressed []string
		firstErr  error
	)
	work, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 3 {
		l := newLockerOn(t, c.ClientsAs(t, "", ""), &redlock.Options{Fencing: true, NodeTimeout: time.Second})
		wg.Go(func() {
			for work.Err() == nil {
				lctx, cancel := context.WithTimeout(work, 3*time.Second)
				lease, err := l.Lock(lctx, "upgrade", ttl)
				cancel()
				if err != nil {
					if work.Err() == nil && !errors.Is(err, redlock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
						failures.Add(1)
						mu.Lock()
						if firstErr == nil {
							firstErr = fmt.Errorf("worker %d: %w", w, err)
						}
						mu.Unlock()
					}
					continue
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				if lease.Token() <= lastToken {
					regressed = append(regressed, fmt.Sprintf("%d after %d", lease.Token(), lastToken))
				}
				lastToken = max(lastToken, lease.Token())
				mu.Unlock()
				acquired.Add(1)
				time.Sleep(5 * time.Millisecond)
				inside.Add(-1)
				_ = lease.Unlock(context.WithoutCancel(ctx)) // a node being replaced may fail it; the key then expires
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })

	progress := func(step string) {
		t.Helper()
		before := acquired.Load()
		eventually(t, 20*time.Second, "locks acquired after "+step, func() (bool, error) {
			return acquired.Load() >= before+20, nil
		})
		t.Logf("%s: %d acquisitions so far", step, acquired.Load())
	}
	progress("start")
	for i, step := range []struct {
		to       string
		keepData bool
	}{
		{"redis:8.0", true}, {"redis:8.0", true},
		{"valkey:8.1", false}, {"valkey:8.1", false},
		{"valkey:8.1", true},
	} {
		n := c.Nodes[i]
		from := n.Server
		if !step.keepData {
			// Out of the quorum for longer than the TTL: every lock the
			// node granted has expired before it comes back empty.
			require.NoError(t, n.Stop(ctx))
			time.Sleep(ttl + 500*time.Millisecond)
		}
		require.NoError(t, n.Replace(ctx, step.to, step.keepData))
		progress(fmt.Sprintf("node %d %s -> %s (keep data: %v)", i, from, step.to, step.keepData))
	}
	stop()
	wg.Wait()

	for i, want := range []string{"redis_version:8.0.", "redis_version:8.0.", "valkey_version:8.1.", "valkey_version:8.1.", "valkey_version:8.1."} {
		info, err := c.Nodes[i].Admin.Info(ctx, "server").Result()
		require.NoError(t, err)
		require.Contains(t, info, want, "node %d after the upgrade", i)
	}
	require.Zero(t, overlaps.Load(), "two holders at once")
	require.Empty(t, regressed, "fencing tokens that did not grow")
	t.Logf("%d acquisitions, last token %d, %d failed attempts (first: %v)", acquired.Load(), lastToken, failures.Load(), firstErr)
	require.Less(t, failures.Load(), acquired.Load()/10, "attempts failed for other reasons than contention; first: %v", firstErr)
	eventually(t, ttl+5*time.Second, "no lock key left once the last TTL has passed", noKeys(ctx, c, "upgrade"))
	keys, err := c.Keys(ctx, "*")
	require.NoError(t, err)
	for i, k := range keys {
		for _, key := range k {
			kept := strings.HasSuffix(key, ":fencing") || strings.Contains(key, ":fencing-token") || key == "redlock:memory"
			require.True(t, kept, "node %d: key %q left (only fencing counters, token records and the node guard's marker stay)", i, key)
		}
	}
}

// The control: the same upgrade to empty nodes without keeping them out for
// a TTL. While A holds the lock, three of five nodes are replaced by empty
// Valkey nodes at once after each other; B then wins on those three while A's
// lease is still valid, the double grant that the TTL wait prevents.
func TestRollingUpgradeWithoutTheTTLWaitDoubleGrants(t *testing.T) {
	ctx := t.Context()
	c := harness.Start(t, harness.Options{Servers: []string{"redis:8.0", "redis:8.0", "redis:8.0", "redis:8.0", "redis:8.0"}, Persistent: true})
	a := newLocker(t, c, &redlock.Options{NodeTimeout: time.Second})
	leaseA, err := a.TryLock(ctx, "upgrade", time.Minute)
	require.NoError(t, err)
	for _, i := range []int{2, 3, 4} {
		require.NoError(t, c.Nodes[i].Replace(ctx, "valkey:8.1", false))
	}
	b := newLockerOn(t, c.ClientsAs(t, "", ""), &redlock.Options{NodeTimeout: time.Second})
	leaseB, err := b.TryLock(ctx, "upgrade", time.Minute)
	require.NoError(t, err, "B did not get the lock: the control shows nothing")
	require.Positive(t, leaseA.Validity(), "A's lease ran out before B won")
	require.NoError(t, leaseB.Unlock(ctx))
	_ = leaseA.Unlock(ctx)
}
