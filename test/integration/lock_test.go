package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
)

// 1. Acquire, extend, release on five real servers.
func TestAcquireExtendRelease(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	l := newLocker(t, c, &redlock.Options{NodeTimeout: time.Second})
	ctx := t.Context()

	lease, err := l.TryLock(ctx, "it:basic", 10*time.Second)
	require.NoError(t, err)
	drain(t, l) // let the nodes after the early decision answer too
	for _, n := range c.Nodes {
		assert.Equal(t, lease.Value(), n.Admin.Get(ctx, "it:basic").Val(), "node %d", n.Index)
		pttl := n.Admin.PTTL(ctx, "it:basic").Val()
		assert.True(t, pttl > 0 && pttl <= 10*time.Second, "node %d PTTL %v", n.Index, pttl)
	}

	require.NoError(t, lease.Extend(ctx, 20*time.Second))
	drain(t, l)
	for _, n := range c.Nodes {
		pttl := n.Admin.PTTL(ctx, "it:basic").Val()
		assert.True(t, pttl > 10*time.Second && pttl <= 20*time.Second, "node %d PTTL after Extend %v", n.Index, pttl)
	}
	require.NoError(t, lease.Check(ctx))

	require.NoError(t, lease.Unlock(ctx))
	drain(t, l)
	for _, n := range c.Nodes {
		assert.Zero(t, n.Admin.Exists(ctx, "it:basic").Val(), "node %d still has the key", n.Index)
	}
}

// 2. Mutual exclusion: 16 goroutines in two Lockers hammer one key; a referee
// counts overlapping critical sections.
func TestMutualExclusionUnderContention(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	opts := &redlock.Options{NodeTimeout: time.Second, RetryDelay: time.Millisecond, RetryJitter: 3 * time.Millisecond}
	lockers := []*redlock.Locker{newLocker(t, c, opts), newLocker(t, c, opts)}

	var inside, overlaps, sections atomic.Int64
	progress := make([]atomic.Int64, 16)
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for time.Now().Before(deadline) && progress[g].Load() < 25 {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				lease, err := lockers[g%2].Lock(ctx, "it:mutex", 5*time.Second)
				cancel()
				if err != nil {
					t.Errorf("goroutine %d: Lock: %v", g, err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(100 * time.Microsecond) // the critical section
				inside.Add(-1)
				sections.Add(1)
				progress[g].Add(1)
				if err := lease.Unlock(t.Context()); err != nil {
					t.Errorf("goroutine %d: Unlock: %v", g, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d critical sections, %d overlaps", sections.Load(), overlaps.Load())
	assert.Zero(t, overlaps.Load(), "two holders at once")
	for g := range progress {
		assert.Positive(t, progress[g].Load(), "goroutine %d never got the lock", g)
	}
}

// 3. Two of five nodes down: locking works. Three down: a *QuorumError, not
// contention, within about NodeTimeout; once the nodes are back and a TTL has
// passed, no key remains.
func TestNodesDown(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	const nodeTimeout = 300 * time.Millisecond
	l := newLocker(t, c, &redlock.Options{NodeTimeout: nodeTimeout})
	ctx := t.Context()

	require.NoError(t, c.Nodes[0].Stop(ctx))
	require.NoError(t, c.Nodes[1].Crash(ctx))
	lease, err := l.TryLock(ctx, "it:down", 2*time.Second)
	require.NoError(t, err, "two of five nodes down must not stop the lock")
	require.NoError(t, lease.Extend(ctx, 2*time.Second))
	require.NoError(t, lease.Unlock(ctx))

	require.NoError(t, c.Nodes[2].Crash(ctx))
	start := time.Now()
	_, err = l.TryLock(ctx, "it:down", 2*time.Second)
	took := time.Since(start)
	t.Logf("TryLock with three of five nodes down failed after %v: %v", took, err)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.NotErrorIs(t, err, redlock.ErrNotObtained)
	assert.Less(t, took, nodeTimeout+time.Second)
	for _, i := range []int{0, 1, 2} {
		assert.Equal(t, redlock.Failed, qe.Nodes[i].Outcome, "node %d", i)
	}

	for _, i := range []int{0, 1, 2} {
		require.NoError(t, c.Nodes[i].Start(ctx))
	}
	drain(t, l)
	eventually(t, 2*time.Second+10*time.Second, "no key left one TTL after the nodes returned", noKeys(ctx, c, "it:down*"))
}

// 4. One node frozen (docker pause): 200 TryLock+Unlock cycles have a p50
// within 2x (+1 ms) of 200 cycles with all five healthy, measured here, and
// a p99 below half the 1 s NodeTimeout that a cycle waiting for the frozen
// node would take. (A p99 bound relative to the healthy p99 failed in CI:
// with 200 cycles the p99 is the second-slowest, and a loaded machine's
// stalls decide it; so did a bound of 100 ms, under a CI run beside other
// tests, where the healthy cycles' own p99 was 148 ms.)
func TestFrozenNodeDoesNotSlowCycles(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	l := newLocker(t, c, &redlock.Options{NodeTimeout: time.Second})
	ctx := t.Context()

	cycles := func(label string) []time.Duration {
		d := make([]time.Duration, 0, 200)
		for i := range 200 {
			start := time.Now()
			lease, err := l.TryLock(ctx, "it:frozen", 5*time.Second)
			require.NoError(t, err, "%s cycle %d: TryLock", label, i)
			require.NoError(t, lease.Unlock(ctx), "%s cycle %d: Unlock", label, i)
			d = append(d, time.Since(start))
		}
		slices.Sort(d)
		return d
	}
	_ = cycles("warm-up") // open every pool's connections first
	healthy := cycles("healthy")

	require.NoError(t, c.Nodes[4].Freeze(ctx))
	defer func() { require.NoError(t, c.Nodes[4].Thaw(context.Background())) }()
	frozen := cycles("frozen")

	p := func(d []time.Duration, q float64) time.Duration { return d[int(q*float64(len(d)))-1] }
	t.Logf("cycle latency, 200 cycles each: healthy p50 %v p99 %v max %v; one node frozen p50 %v p99 %v max %v",
		p(healthy, 0.5), p(healthy, 0.99), healthy[len(healthy)-1], p(frozen, 0.5), p(frozen, 0.99), frozen[len(frozen)-1])
	assert.LessOrEqual(t, p(frozen, 0.5), 2*p(healthy, 0.5)+time.Millisecond, "the median cycle slowed by the frozen node")
	assert.Less(t, p(frozen, 0.99), 500*time.Millisecond, "cycles waited for the frozen node (NodeTimeout 1s)")
	eventually(t, 5*time.Second, "the responsive nodes hold no key", func() (bool, error) {
		for _, n := range c.Nodes[:4] {
			if k, err := n.Admin.Exists(ctx, "it:frozen").Result(); err != nil || k > 0 {
				return false, err
			}
		}
		return true, nil
	})
}

// 5. Late replies: one node is delayed past the decision; once the failed
// attempts are over and the delay has drained, no node holds any of their keys.
func TestLateRepliesLeaveNoKeys(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	l := newLocker(t, c, &redlock.Options{NodeTimeout: 100 * time.Millisecond})
	ctx := t.Context()
	for _, i := range []int{0, 1} { // another holder has two nodes
		require.NoError(t, c.Nodes[i].Admin.Set(ctx, "it:late", "someone-else", time.Minute).Err())
	}
	c.Nodes[4].SetLatency(400*time.Millisecond, 0) // its SETs land after the decision

	for i := range 5 {
		_, err := l.TryLock(ctx, "it:late", 30*time.Second)
		require.ErrorIs(t, err, quorum.ErrNoReply, "attempt %d", i)
	}
	drain(t, l)
	for _, n := range c.Nodes[2:] {
		assert.Zero(t, n.Admin.Exists(ctx, "it:late").Val(), "node %d kept a late grant", n.Index)
	}
	for _, n := range c.Nodes[:2] {
		assert.Equal(t, "someone-else", n.Admin.Get(ctx, "it:late").Val(), "another holder's key was touched")
	}
}

// 6. SCRIPT FLUSH on every node between acquire and release: Extend and
// Unlock fall back from EVALSHA to EVAL and still succeed.
func TestScriptCacheLoss(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	l := newLocker(t, c, &redlock.Options{NodeTimeout: time.Second})
	ctx := t.Context()
	lease, err := l.TryLock(ctx, "it:flush", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, lease.Extend(ctx, 10*time.Second)) // caches the extend script
	drain(t, l)
	flush := func() {
		for _, n := range c.Nodes {
			require.NoError(t, n.FlushScripts(ctx))
		}
	}
	flush()
	require.NoError(t, lease.Extend(ctx, 10*time.Second))
	flush()
	require.NoError(t, lease.Unlock(ctx))
	drain(t, l)
	eventually(t, time.Second, "keys gone after Unlock", noKeys(ctx, c, "it:flush"))
}

// 7. The caller's context is cancelled mid-acquire while nodes are frozen:
// TryLock returns promptly with the context's error, and the responsive
// nodes hold no key.
func TestCancelMidAcquireWithFrozenNodes(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	l := newLocker(t, c, &redlock.Options{NodeTimeout: 5 * time.Second})
	for _, n := range c.Nodes[2:] {
		require.NoError(t, n.Freeze(t.Context()))
	}
	defer func() {
		for _, n := range c.Nodes[2:] {
			require.NoError(t, n.Thaw(context.Background()))
		}
	}()

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := l.TryLock(ctx, "it:cancel", 30*time.Second)
	took := time.Since(start)
	t.Logf("TryLock returned %v after cancellation at 100ms", took)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, redlock.ErrNotObtained)
	assert.Less(t, took, time.Second, "TryLock must return promptly once the caller gives up")
	for _, n := range c.Nodes[:2] {
		assert.Zero(t, n.Admin.Exists(t.Context(), "it:cancel").Val(), "responsive node %d kept the key", n.Index)
	}
}

// 8. A node restart while a lease is held: what Check and Extend report,
// without persistence (the restarted node forgets the key) and with AOF and
// appendfsync always (it does not).
func TestNodeRestartWhileHeld(t *testing.T) {
	t.Run("without persistence", func(t *testing.T) {
		// Every Locker of a deployment must share one MaxTTL: it is both
		// the longest lease and the quarantine. 10 s keeps the test short.
		const maxTTL = 10 * time.Second
		c := harness.Start(t, harness.Options{})
		// NoHeal: the failure model of a lease whose nodes forget it (with
		// healing, its extensions would set the key again: TestRollingRestartHeals).
		l := newLocker(t, c, &redlock.Options{NodeTimeout: time.Second, MaxTTL: maxTTL, NoHeal: true})
		ctx := t.Context()
		lease, err := l.TryLock(ctx, "it:restart", maxTTL)
		require.NoError(t, err)
		drain(t, l)

		// One restarted node: four still hold the value, the lease stands.
		require.NoError(t, c.Nodes[0].Restart(ctx))
		assert.Zero(t, c.Nodes[0].Admin.Exists(ctx, "it:restart").Val(), "the restarted node forgot the key")
		assert.NoError(t, lease.Check(ctx))
		assert.NoError(t, lease.Extend(ctx, maxTTL))
		until := time.Now().Add(lease.Validity()) // the first lease's end, as its holder counts it

		// Three restarted: only two hold it. Check and Extend report the loss.
		require.NoError(t, c.Nodes[1].Restart(ctx))
		require.NoError(t, c.Nodes[2].Restart(ctx))
		assert.Positive(t, lease.Validity(), "the local clock still says valid")
		assert.ErrorIs(t, lease.Check(ctx), redlock.ErrNotHeld)

		// The node guard keeps the three out of the quorum: no second holder.
		guarded := untrustingLocker(t, c.Lockers(), &redlock.Options{NodeTimeout: time.Second, MaxTTL: maxTTL})
		_, err = guarded.TryLock(ctx, "it:restart", maxTTL)
		require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "three forgetful restarts")
		drain(t, guarded)
		// The negative control: without the guard, the second holder gets in.
		unguarded := untrustingLocker(t, c.Lockers(), &redlock.Options{NodeTimeout: time.Second, MaxTTL: maxTTL, NoQuarantine: true})
		stolen, err := unguarded.TryLock(ctx, "it:restart", maxTTL)
		require.NoError(t, err, "the failure model: three forgetful restarts let a second holder in")
		assert.True(t, time.Now().Before(until), "a double grant: the first lease is still valid")
		require.NoError(t, stolen.Unlock(ctx))

		// Once the quarantine ends (MaxTTL after the restarts), the guarded
		// Locker gets the lock, and by then the first lease has run out.
		eventually(t, 3*maxTTL, "the quarantine ends", func() (bool, error) {
			next, err := guarded.TryLock(ctx, "it:restart", maxTTL)
			if err != nil {
				return false, nil
			}
			assert.False(t, time.Now().Before(until), "the first lease was still valid when the quarantine ended")
			return true, next.Unlock(ctx)
		})
		assert.ErrorIs(t, lease.Extend(ctx, maxTTL), redlock.ErrNotHeld)
		assert.ErrorIs(t, lease.Unlock(ctx), redlock.ErrNotHeld)
	})

	t.Run("with persistence", func(t *testing.T) {
		c := harness.Start(t, harness.Options{Persistent: true})
		l := newLocker(t, c, &redlock.Options{NodeTimeout: time.Second})
		ctx := t.Context()
		lease, err := l.TryLock(ctx, "it:restart", 30*time.Second)
		require.NoError(t, err)
		drain(t, l)

		for _, n := range c.Nodes[:3] {
			require.NoError(t, n.Restart(ctx))
			assert.Equal(t, lease.Value(), n.Admin.Get(ctx, "it:restart").Val(), "node %d lost the key despite AOF", n.Index)
		}
		assert.NoError(t, lease.Check(ctx))
		assert.NoError(t, lease.Extend(ctx, 30*time.Second))
		other := newLocker(t, c, &redlock.Options{NodeTimeout: time.Second})
		_, err = other.TryLock(ctx, "it:restart", 30*time.Second)
		assert.ErrorIs(t, err, redlock.ErrNotObtained)
		require.NoError(t, lease.Unlock(ctx))
	})
}

// Partitions and key loss (the harness's other faults) in one scenario: one
// node partitioned and another losing its key still leave a majority.
func TestPartitionAndKeyLoss(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	l := newLocker(t, c, &redlock.Options{NodeTimeout: 200 * time.Millisecond})
	ctx := t.Context()
	lease, err := l.TryLock(ctx, "it:part", 30*time.Second)
	require.NoError(t, err)
	drain(t, l)

	c.Nodes[0].Partition()
	require.NoError(t, c.Nodes[1].LoseKey(ctx, "it:part"))
	assert.NoError(t, lease.Check(ctx), "three of five still hold it")
	require.NoError(t, c.Nodes[2].LoseKey(ctx, "it:part"))
	err = lease.Check(ctx)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe, "two holders, one unreachable: %v", err)
	assert.Equal(t, redlock.Failed, qe.Nodes[0].Outcome)

	c.Nodes[0].Heal()
	assert.NoError(t, lease.Check(ctx), "healed: node 0 kept the key, so three hold it again")
	require.NoError(t, lease.Unlock(ctx))
	drain(t, l)
	holders, err := c.Holders(ctx, "it:part", lease.Value())
	require.NoError(t, err)
	assert.Empty(t, holders)
}

// Majorities of other sizes: three nodes tolerate one down, seven tolerate
// three; one more down is a *QuorumError.
func TestClusterSizes(t *testing.T) {
	for _, size := range []int{3, 7} {
		t.Run(fmt.Sprintf("%d nodes", size), func(t *testing.T) {
			c := harness.Start(t, harness.Options{Nodes: size})
			l := newLocker(t, c, &redlock.Options{NodeTimeout: 300 * time.Millisecond})
			ctx := t.Context()
			tolerated := (size - 1) / 2
			for _, n := range c.Nodes[:tolerated] {
				require.NoError(t, n.Crash(ctx))
			}
			lease, err := l.TryLock(ctx, "it:size", 10*time.Second)
			require.NoError(t, err, "%d of %d nodes down", tolerated, size)
			require.NoError(t, lease.Unlock(ctx))

			require.NoError(t, c.Nodes[tolerated].Crash(ctx))
			_, err = l.TryLock(ctx, "it:size", 10*time.Second)
			var qe *redlock.QuorumError
			require.ErrorAs(t, err, &qe, "%d of %d nodes down", tolerated+1, size)
			assert.Equal(t, size/2+1, qe.Need)
		})
	}
}
