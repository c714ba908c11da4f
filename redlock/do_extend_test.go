package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// Lease.Do schedules its first extension a third of its own ttl after it
// starts, whatever validity the lease has left. A lease with less left
// than that (taken with a shorter TTL, or resumed late from a handle) runs
// out before the first extension: Do cancels fn with ErrLost though nodes
// answered every time and an extension would have kept it.
func TestLeaseDoExtendsBeforeTheLeasesOwnValidityRunsOut(t *testing.T) {
	work := func(ctx context.Context, _ *redlock.Lease) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(1200 * time.Millisecond): // past the lease's own validity
			return nil
		}
	}
	t.Run("taken short, run long", func(t *testing.T) {
		c := newCluster(t, 3)
		l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
		lease, err := l.TryLock(t.Context(), "short-then-long", 400*time.Millisecond)
		require.NoError(t, err)
		require.NoError(t, lease.Do(t.Context(), 3*time.Second, work))
	})
	t.Run("resumed late", func(t *testing.T) {
		c := newCluster(t, 3)
		l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
		lease, err := l.TryLock(t.Context(), "resumed-late", 3*time.Second)
		require.NoError(t, err)
		for _, m := range c.servers {
			m.SetTTL("resumed-late", 400*time.Millisecond) // the handle reached the worker late
		}
		worker := otherLocker(t, c, &redlock.Options{NodeTimeout: time.Second})
		resumed, err := worker.Resume(t.Context(), lease.Handle())
		require.NoError(t, err)
		require.NoError(t, resumed.Do(t.Context(), 3*time.Second, work))
	})
}

// Two Lease.Do on one lease: the first to return would release the lease
// while the other's fn still runs under it, and the other would take that
// release for its own fn's Unlock and report nothing. A lease runs under
// one Do at a time: the second is refused.
func TestConcurrentLeaseDoDoesNotHideARelease(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), nil)
	lease, err := l.TryLock(t.Context(), "shared", time.Minute)
	require.NoError(t, err)

	running := make(chan struct{})
	firstDone := make(chan struct{})
	var wg sync.WaitGroup
	var err2 error
	ran2 := false
	wg.Go(func() {
		err2 = lease.Do(t.Context(), time.Minute, func(ctx context.Context, _ *redlock.Lease) error {
			ran2 = true
			close(running)
			<-firstDone // still working when the other Do released the lease
			return nil
		})
	})
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the first Do did not run fn")
	}
	err1 := lease.Do(t.Context(), time.Minute, func(context.Context, *redlock.Lease) error { return nil })
	close(firstDone)
	wg.Wait()
	// The second Do is refused (the lease already runs under Do), so the
	// first's fn keeps its lease to the end, and its Do releases it.
	require.ErrorContains(t, err1, "already runs under Do")
	require.True(t, ran2)
	require.NoError(t, err2)
	require.ErrorIs(t, lease.Check(t.Context()), redlock.ErrNotHeld, "released by the Do that ran")
}

// QuorumError.Keys is the caller's: changing it must not change the
// lease's keys, which later rounds act on.
func TestQuorumErrorKeysAreACopy(t *testing.T) {
	fail := func(c *cluster, msg string) {
		for _, m := range c.servers {
			m.SetError(msg)
		}
	}
	keys := []string{"{q}a", "{q}b"}
	held := func(t *testing.T) (*cluster, *redlock.Lease) {
		c := newCluster(t, 3)
		l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
		lease, err := l.TryLockMulti(t.Context(), keys, time.Minute)
		require.NoError(t, err)
		return c, lease
	}
	t.Run("extend", func(t *testing.T) {
		c, lease := held(t)
		fail(c, "ERR down")
		err := lease.Extend(t.Context(), time.Minute)
		var q *redlock.QuorumError
		require.ErrorAs(t, err, &q)
		require.NotErrorIs(t, err, redlock.ErrNotHeld)
		require.Equal(t, keys, q.Keys)
		q.Keys[1] = "{q}never-locked"
		fail(c, "")
		require.NoError(t, lease.Extend(t.Context(), time.Minute))
		assert.Empty(t, c.holding("{q}never-locked", lease.Value()), "an extension set a key the lease never acquired")
		assert.Len(t, c.holding("{q}b", lease.Value()), 3)
		require.NoError(t, lease.Unlock(t.Context()))
	})
	t.Run("unlock", func(t *testing.T) {
		c, lease := held(t)
		fail(c, "ERR down")
		err := lease.Unlock(t.Context())
		fail(c, "")
		var q *redlock.QuorumError
		require.ErrorAs(t, err, &q)
		q.Keys[0] = "{q}changed"
		assert.Equal(t, keys, lease.Keys())
	})
}

// A failed Extend with a longer TTL leaves the validity, and Done's
// margin, as they were; one with a shorter TTL brings both to it. Done
// still closes before the validity ends.
func TestFailedExtendKeepsDoneBeforeValidity(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
	lease, err := l.TryLock(t.Context(), "span", 2*time.Second)
	require.NoError(t, err)
	until := lease.Until()
	for _, m := range c.servers {
		m.SetError("ERR down")
	}
	require.Error(t, lease.Extend(t.Context(), time.Minute))
	assert.Equal(t, until, lease.Until(), "a failed longer extension gives nothing")
	for _, m := range c.servers {
		m.SetError("")
	}
	select {
	case <-lease.Done():
		assert.Less(t, time.Now().Add(-50*time.Millisecond), until, "Done closed after the validity")
		assert.True(t, time.Now().After(until.Add(-time.Second)), "Done closed early: margin from the failed 1m extension")
	case <-time.After(10 * time.Second):
		t.Fatal("Done never closed")
	}
	_ = lease.Unlock(t.Context()) // ran out: ErrNotHeld or nil, either is fine here
}
