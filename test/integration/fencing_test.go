package integration

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/fence"
	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
)

// The Kleppmann scenario on real servers, with real expiry: A acquires and
// is paused until its lease has expired on the nodes; B acquires and writes
// to a guarded resource (a sixth Redis server); A resumes and writes. A
// referee counts stale writes the resource accepted: zero with fencing
// tokens, one per round without them.
func TestPausedHolderIsFencedOff(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	storage := harness.Start(t, harness.Options{Nodes: 1}).Nodes[0].Admin
	guard := fence.NewRedis(storage)
	ctx := t.Context()
	const rounds, ttl = 5, 300 * time.Millisecond

	staleAccepted := func(fencing bool) int {
		opts := &redlock.Options{Fencing: fencing, NodeTimeout: time.Second}
		a, b := newLocker(t, c, opts), newLocker(t, c, opts)
		// Without tokens the resource has nothing to check (the guard
		// refuses token 0): a plain write, as such a system makes.
		write := func(value string, token uint64) error {
			if !fencing {
				return storage.Set(ctx, "resource", value, 0).Err()
			}
			return guard.Set(ctx, "resource", value, token)
		}
		stale := 0
		for round := range rounds {
			key := "it:kleppmann"
			leaseA, err := a.TryLock(ctx, key, ttl)
			require.NoError(t, err, "round %d", round)
			require.NoError(t, write("A before the pause", leaseA.Token()))

			// A is paused; the lock expires on the servers by their own clocks.
			eventually(t, 10*ttl, "lease expired on the nodes", noKeys(ctx, c, key))

			leaseB, err := b.TryLock(ctx, key, ttl)
			require.NoError(t, err, "round %d", round)
			require.NoError(t, write("B", leaseB.Token()))

			// A resumes, unaware, and writes.
			if err := write("A after the pause", leaseA.Token()); err == nil {
				stale++
			} else {
				require.ErrorIs(t, err, fence.ErrStaleToken)
			}
			assert.LessOrEqual(t, leaseA.Validity(), time.Duration(0), "A's own clock says it expired")
			require.NoError(t, leaseB.Unlock(ctx))
			drain(t, a)
			drain(t, b)
		}
		return stale
	}
	withTokens := staleAccepted(true)
	require.NoError(t, storage.FlushAll(ctx).Err())
	withoutTokens := staleAccepted(false)
	t.Logf("stale writes accepted in %d rounds: %d with fencing tokens, %d without", rounds, withTokens, withoutTokens)
	assert.Zero(t, withTokens)
	assert.Equal(t, rounds, withoutTokens, "without tokens the paused holder's write goes through")
}

// Fencing counters and persistence: with AOF and appendfsync always, tokens
// keep growing across a crash of every node; Durability says so, and
// RequireDurable admits the acquisition. Without persistence, a crash of all
// nodes restarts the counters and tokens go backwards: Durability warns, and
// RequireDurable refuses.
func TestFencingDurability(t *testing.T) {
	lockThrice := func(t *testing.T, l *redlock.Locker) (last uint64) { // tokens must grow
		for range 3 {
			lease, err := l.TryLock(t.Context(), "it:fence", 10*time.Second)
			require.NoError(t, err)
			require.Greater(t, lease.Token(), last)
			last = lease.Token()
			require.NoError(t, lease.Unlock(t.Context()))
			drain(t, l)
		}
		return last
	}
	crashAll := func(t *testing.T, c *harness.Cluster) {
		for _, n := range c.Nodes {
			require.NoError(t, n.Restart(t.Context()))
		}
	}
	t.Run("with persistence", func(t *testing.T) {
		c := harness.Start(t, harness.Options{Persistent: true})
		l := newLocker(t, c, &redlock.Options{Fencing: true, RequireDurable: true, NodeTimeout: time.Second})
		for _, d := range l.Durability(t.Context()) {
			require.NoError(t, d.Err)
			assert.True(t, d.Durable, "%s: %+v", d.Name, d)
		}
		last := lockThrice(t, l)
		crashAll(t, c)
		lease, err := l.TryLock(t.Context(), "it:fence", 10*time.Second)
		require.NoError(t, err)
		assert.Greater(t, lease.Token(), last, "tokens must keep growing across crashes")
		require.NoError(t, lease.Unlock(t.Context()))
	})

	t.Run("without persistence", func(t *testing.T) {
		c := harness.Start(t, harness.Options{})
		strict := newLocker(t, c, &redlock.Options{Fencing: true, RequireDurable: true, NodeTimeout: time.Second})
		_, err := strict.TryLock(t.Context(), "it:fence", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotDurable)
		t.Logf("RequireDurable refused: %v", err)

		l := newLocker(t, c, &redlock.Options{Fencing: true, NodeTimeout: time.Second})
		last := lockThrice(t, l)
		crashAll(t, c)
		// The node guard keeps the forgetful nodes out for MaxTTL; the
		// counters they lost are lost all the same.
		_, err = l.TryLock(t.Context(), "it:fence", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "nodes that restarted without persistence")
		drain(t, l) // the grants that did not count are released in the background
		unguarded := untrustingLocker(t, c.Lockers(), &redlock.Options{Fencing: true, NodeTimeout: time.Second, NoQuarantine: true})
		lease, err := unguarded.TryLock(t.Context(), "it:fence", 10*time.Second)
		require.NoError(t, err)
		assert.Less(t, lease.Token(), last, "the failure model: forgetful nodes restart the counters")
		t.Logf("token before the crash %d, after %d", last, lease.Token())
		require.NoError(t, lease.Unlock(t.Context()))
	})
}

// What fencing costs: a heavier script, and a second majority round trip only
// where the deciding counters disagree; nothing on release. Measured as
// acquire latency over 300 cycles each way, in one run.
func TestFencingCost(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	measure := func(fencing bool) (acquire, release []time.Duration) {
		l := newLocker(t, c, &redlock.Options{Fencing: fencing, NodeTimeout: time.Second})
		for i := range 350 {
			t0 := time.Now()
			lease, err := l.TryLock(t.Context(), "it:cost", 10*time.Second)
			require.NoError(t, err)
			t1 := time.Now()
			require.NoError(t, lease.Unlock(t.Context()))
			if i >= 50 { // warm-up: connections, script caches
				acquire = append(acquire, t1.Sub(t0))
				release = append(release, time.Since(t1))
			}
		}
		slices.Sort(acquire)
		slices.Sort(release)
		return acquire, release
	}
	plainAcq, plainRel := measure(false)
	fencedAcq, fencedRel := measure(true)
	p := func(d []time.Duration, q float64) time.Duration { return d[int(q*float64(len(d)))-1] }
	t.Logf("acquire p50/p99: plain %v/%v, fenced %v/%v (%.2fx at p50); release p50: plain %v, fenced %v",
		p(plainAcq, .5), p(plainAcq, .99), p(fencedAcq, .5), p(fencedAcq, .99),
		float64(p(fencedAcq, .5))/float64(p(plainAcq, .5)), p(plainRel, .5), p(fencedRel, .5))
	assert.LessOrEqual(t, p(fencedAcq, .5), 3*p(plainAcq, .5)+time.Millisecond, "more than one extra round trip")
}

// Do on real servers: when a majority of nodes freezes (docker pause), the
// extensions fail and fn's context is cancelled before the lease's validity
// runs out; Do reports ErrLost and releases the lock once the nodes thaw.
func TestDoCancelsWorkWhenNodesFreeze(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	// The validity to compare with is the lease's latest: freezing three
	// containers can take longer than an extension's period on a loaded
	// machine, so an extension may still succeed after fn began.
	var mu sync.Mutex
	var held *redlock.Lease
	var until time.Time
	extended := redlock.ObserverFunc(func(e redlock.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Op == redlock.OpExtend && e.Err == nil && held != nil {
			until = held.Until() // set before the event is emitted
		}
	})
	l := newLocker(t, c, &redlock.Options{Fencing: true, NodeTimeout: 100 * time.Millisecond, Observer: extended})
	const ttl = 900 * time.Millisecond
	var cancelled time.Time
	err := l.Do(t.Context(), "it:do", ttl, func(ctx context.Context, lease *redlock.Lease) error {
		mu.Lock()
		held, until = lease, lease.Until()
		mu.Unlock()
		// The cancellation's time is taken as it happens, not after the
		// freezes (which can outlast the TTL on a loaded machine).
		done := make(chan time.Time, 1)
		go func() {
			<-ctx.Done()
			done <- time.Now()
		}()
		for _, n := range c.Nodes[:3] {
			require.NoError(t, n.Freeze(t.Context()))
		}
		select {
		case cancelled = <-done:
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("fn's context was never cancelled")
		}
	})
	for _, n := range c.Nodes[:3] {
		require.NoError(t, n.Thaw(context.Background()))
	}
	require.ErrorIs(t, err, redlock.ErrLost)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("work cancelled %v before the lease's validity ran out", until.Sub(cancelled))
	assert.True(t, cancelled.Before(until))
	drain(t, l)
	eventually(t, 2*ttl+5*time.Second, "no key left once thawed and expired", noKeys(context.Background(), c, "it:do"))
}
