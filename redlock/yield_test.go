package redlock_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// isSet reports whether a hookNode's Do arguments are the acquiring SET.
func isSet(args []any) bool {
	name, _ := args[0].(string)
	return strings.EqualFold(name, "set")
}

// Genuine contention: another holder's value is on a majority of the nodes
// (1 and 2), and node 2 is slow. Lock's attempt sees node 1's Taken,
// yields, and stops waiting for node 2; the loss is still contention
// (ErrNotObtained), as Lock and QuorumError document, not a node that did
// not reply, as an outage would read. Control: the same, with node 2
// answering at once. (It once read as an outage.)
func TestAYieldedLockUnderContentionStillSaysNotObtained(t *testing.T) {
	for _, tc := range []struct {
		name string
		slow bool
	}{{"slow-node", true}, {"control-prompt-node", false}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			gate := make(chan struct{}) // node 2's SET answers once the attempt was decided
			var closeGate sync.Once
			if !tc.slow {
				closeGate.Do(func() { close(gate) })
			}
			nodes := c.nodes(func(i int, n redlock.Node) redlock.Node {
				if i != 2 {
					return n
				}
				return &hookNode{Node: n, beforeDo: func(ctx context.Context, args []any) error {
					if isSet(args) {
						select { // slow: answers once the attempt was decided, or after a second
						case <-gate:
						case <-time.After(time.Second):
						}
					}
					return nil
				}}
			})
			c.setOther(t, "k", 1, 2) // another holder holds a majority
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			obs := redlock.ObserverFunc(func(e redlock.Event) {
				if e.Op == redlock.OpAcquire && e.Err != nil {
					cancel() // one decided attempt is enough
					closeGate.Do(func() { close(gate) })
				}
			})
			l := newLocker(t, nodes, &redlock.Options{NodeTimeout: 5 * time.Second, RetryDelay: time.Minute, Observer: obs})
			_, err := l.Lock(ctx, "k", time.Minute)
			closeGate.Do(func() { close(gate) })
			drain(t, l)
			require.ErrorIs(t, err, context.Canceled)
			require.ErrorIs(t, err, redlock.ErrNotObtained, "a majority holds another value: the loss is contention, not an outage")
		})
	}
}

// A key free on a majority (nodes 0 and 2) with a stale value on node 1
// (a crashed client's minority grant, or this Locker's own release that
// did not reach node 1) and node 2 slower than three times node 1's reply
// (a remote node, a WAIT): every attempt of Lock yields at node 1's Taken
// and never waits for node 2, so Lock once could not win while the stale
// value lived (up to MaxTTL), though TryLock wins at once (control). Now
// each attempt that yielded makes the next wait four times as long: Lock
// wins within a few attempts, though node 2's queue
// grows by its latency at each (an acquisition waits there for the last
// one's release: the transport keeps a key's commands in order).
func TestALockCanWinAKeyFreeOnAMajorityWithOneStaleNodeAndOneSlowNode(t *testing.T) {
	const slow = 200 * time.Millisecond
	c := newCluster(t, 3)
	nodes := c.nodes(func(i int, n redlock.Node) redlock.Node {
		if i != 2 {
			return n
		}
		return &hookNode{Node: n, beforeDo: func(ctx context.Context, args []any) error {
			if isSet(args) {
				time.Sleep(slow) // node 2's latency
			}
			return nil
		}}
	})
	c.setOther(t, "k", 1) // stale: only node 1
	var attempts atomic.Int32
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	obs := redlock.ObserverFunc(func(e redlock.Event) {
		if e.Op == redlock.OpAcquire && e.Err != nil && attempts.Add(1) == 8 {
			cancel() // eight attempts, each of which would have won by waiting for node 2
		}
	})
	l := newLocker(t, nodes, &redlock.Options{NodeTimeout: 5 * time.Second, RetryDelay: time.Millisecond, RetryJitter: time.Millisecond, Observer: obs})
	t.Run("lock", func(t *testing.T) {
		lease, err := l.Lock(ctx, "k", time.Minute)
		drain(t, l)
		require.NoError(t, err, "the key is free on nodes 0 and 2: Lock made %d failed attempts", attempts.Load())
		require.NoError(t, lease.Unlock(context.Background()))
	})
	t.Run("control-trylock", func(t *testing.T) {
		drain(t, l)
		lease, err := l.TryLock(t.Context(), "k", time.Minute)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(context.Background()))
	})
	drain(t, l)
}

// The same with this Locker's own stale value: an Unlock that did not reach
// node 1 (a timeout there; Unlock still succeeds, on nodes 0 and 2) leaves
// the lease's value on node 1 until its TTL, and the client's next Lock of
// the key yields at node 1's Taken on every attempt while node 2 is slow:
// a client once could not take again a lock it had just released, though
// the key is free on a majority; its attempts now wait longer each time
// they yield, and one wins. Control: TryLock takes it.
func TestALockAfterAnUnlockThatMissedANodeWins(t *testing.T) {
	const slow = 200 * time.Millisecond
	c := newCluster(t, 3)
	var dropRelease atomic.Bool
	nodes := c.nodes(func(i int, n redlock.Node) redlock.Node {
		switch i {
		case 1:
			return &hookNode{Node: n, beforeScript: func(context.Context, []string, []any) error {
				if dropRelease.Load() {
					return errInjected // the release did not reach node 1
				}
				return nil
			}}
		case 2:
			return &hookNode{Node: n, beforeDo: func(ctx context.Context, args []any) error {
				if isSet(args) {
					time.Sleep(slow) // node 2's latency
				}
				return nil
			}}
		}
		return n
	})
	var attempts atomic.Int32
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	obs := redlock.ObserverFunc(func(e redlock.Event) {
		if e.Op == redlock.OpAcquire && e.Err != nil && attempts.Add(1) == 8 {
			cancel()
		}
	})
	l := newLocker(t, nodes, &redlock.Options{NodeTimeout: 5 * time.Second, RetryDelay: time.Millisecond, RetryJitter: time.Millisecond, Observer: obs})
	first, err := l.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err, "the first Lock: no other value anywhere")
	dropRelease.Store(true)
	require.NoError(t, first.Unlock(t.Context()), "released on nodes 0 and 2")
	dropRelease.Store(false)
	drain(t, l)
	require.Equal(t, []int{1}, c.holding("k", mustGet(t, c, 1, "k")), "the old value is left on node 1 alone")

	again, err := l.Lock(ctx, "k", time.Minute)
	drain(t, l)
	if err == nil {
		require.NoError(t, again.Unlock(context.Background()))
	}
	require.NoError(t, err, "the key is free on nodes 0 and 2: Lock made %d failed attempts", attempts.Load())
}

func mustGet(t *testing.T, c *cluster, i int, key string) string {
	t.Helper()
	v, err := c.servers[i].Get(key)
	require.NoError(t, err)
	return v
}
