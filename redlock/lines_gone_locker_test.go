package redlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// A Locker gone (its process crashed while it waited: its place stays in
// the key's line for lineTTL) is named by this Locker's Unlock. The
// client's next Lock, at once, is marked passed: it waits in the line only
// as long as a named Locker takes to try (handOffWait: a few round trips),
// then tries, and wins the free key, not a whole poll later (a Lock with
// a deadline shorter than RetryDelay once failed without a single
// attempt).
func TestALockAfterAnUnlockThatNamedAGoneLockerTriesAtOnce(t *testing.T) {
	c := newCluster(t, 3)
	for _, m := range c.servers {
		_, err := m.Push("{k}:redlock-waiters", "a-crashed-locker")
		require.NoError(t, err)
	}
	var attempts atomic.Int32
	obs := redlock.ObserverFunc(func(e redlock.Event) {
		if e.Op == redlock.OpAcquire {
			attempts.Add(1)
		}
	})
	l := newLocker(t, c.nodes(nil), &redlock.Options{RetryDelay: 5 * time.Second, RetryJitter: time.Millisecond, Observer: obs})
	lease, err := l.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(t.Context())) // names the gone Locker on every node
	attempts.Store(0)

	ctx, cancel := context.WithTimeout(t.Context(), time.Second) // far shorter than the poll, far longer than an attempt
	defer cancel()
	lease, err = l.Lock(ctx, "k", time.Minute)
	require.NoError(t, err, "the key is free: Lock made %d attempts", attempts.Load())
	require.NoError(t, lease.Unlock(context.Background()))
}
