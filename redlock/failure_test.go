package redlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/redlock"
)

// Client pause (docs/failure-models.md): A holds a lease and is paused past
// its TTL; the servers expire the key and B acquires. When A resumes, its
// lease reports no validity, Extend refuses to resurrect it, and Unlock
// reports ErrNotHeld without touching B's key. What A cannot be stopped from
// is writing to the resource: that takes a fencing token.
func TestClientPausedPastExpiry(t *testing.T) {
	c := newCluster(t, 5)
	clockA := clock.NewFake(time.Unix(0, 0))
	a := newLocker(t, c.nodes(nil), &redlock.Options{Clock: clockA})
	b := newLocker(t, c.nodes(nil), nil)

	leaseA, err := a.TryLock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err)
	drain(t, a)

	// A is paused for 15 s: its clock and the servers' move on together.
	clockA.Advance(15 * time.Second)
	for _, m := range c.servers {
		m.FastForward(15 * time.Second)
	}
	leaseB, err := b.TryLock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err, "B must get the expired lock")
	drain(t, b)

	assert.LessOrEqual(t, leaseA.Validity(), time.Duration(0), "A's lease must read as expired")
	assert.ErrorIs(t, leaseA.Check(t.Context()), redlock.ErrNotHeld)
	assert.ErrorIs(t, leaseA.Extend(t.Context(), 10*time.Second), redlock.ErrNotHeld)
	assert.ErrorIs(t, leaseA.Unlock(t.Context()), redlock.ErrNotHeld)
	drain(t, a)
	assert.Equal(t, []int{0, 1, 2, 3, 4}, c.holding("k", leaseB.Value()), "A's cleanup touched B's lock")
	require.NoError(t, leaseB.Check(t.Context()))
}

// Clock drift: a client whose clock runs slow measures less elapsed time than
// the servers do. The drift allowance (1% + 2 ms by default) covers a client
// up to 1% slow: its lease ends, by the servers' clocks, before the key does.
func TestSlowClientClockWithinDriftBound(t *testing.T) {
	c := newCluster(t, 3)
	slow := clock.NewFake(time.Unix(0, 0))
	l := newLocker(t, c.nodes(nil), &redlock.Options{Clock: slow})
	lease, err := l.TryLock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err)
	drain(t, l)

	// The servers' 10 s pass while the client's clock, 1% slow, sees 9.9 s.
	slow.Advance(9900 * time.Millisecond)
	assert.LessOrEqual(t, lease.Validity(), time.Duration(0),
		"a lease must not outlive the key for a client within the drift bound")
	for _, m := range c.servers {
		m.FastForward(9999 * time.Millisecond)
		assert.True(t, m.Exists("k"), "the key is still there 1 ms before its TTL")
	}
}
