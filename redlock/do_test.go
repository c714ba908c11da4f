package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

func TestDoHoldsAndReleases(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), nil)
	ran := false
	err := l.Do(t.Context(), "k", time.Minute, func(ctx context.Context, lease *redlock.Lease) error {
		ran = true
		_, err := l.TryLock(ctx, "k", time.Minute)
		assert.ErrorIs(t, err, redlock.ErrNotObtained, "the lock is held while fn runs")
		return nil
	})
	require.NoError(t, err)
	assert.True(t, ran)
	drain(t, l)
	for _, m := range c.servers {
		assert.False(t, m.Exists("k"), "released after fn")
	}

	fnErr := errors.New("work failed")
	err = l.Do(t.Context(), "k", time.Minute, func(context.Context, *redlock.Lease) error { return fnErr })
	require.ErrorIs(t, err, fnErr)
	assert.NotErrorIs(t, err, redlock.ErrLost)
	assert.Error(t, l.Do(t.Context(), "k", time.Minute, nil))
}

func TestDoReleasesOnPanic(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), nil)
	func() {
		defer func() { assert.Equal(t, "boom", recover(), "the panic is re-raised") }()
		_ = l.Do(t.Context(), "k", time.Minute, func(context.Context, *redlock.Lease) error { panic("boom") })
	}()
	drain(t, l)
	for _, m := range c.servers {
		assert.False(t, m.Exists("k"), "released after a panic")
	}
}

func TestDoExtendsWhileWorkRuns(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
	const ttl = 300 * time.Millisecond
	err := l.Do(t.Context(), "k", ttl, func(ctx context.Context, lease *redlock.Lease) error {
		first := lease.Until()
		deadline := time.Now().Add(5 * time.Second)
		for lease.Until() == first { // wait for an extension, bounded
			if time.Now().After(deadline) {
				return errors.New("no extension within 5s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		return ctx.Err()
	})
	require.NoError(t, err)
}

// When extensions fail (a majority of nodes hung), fn's context is cancelled
// before the lease's validity runs out, and Do reports the loss.
func TestDoCancelsWorkWhenExtensionsFail(t *testing.T) {
	c := newCluster(t, 5)
	proxies, nodes := c.proxied(t)
	l := newLocker(t, nodes, &redlock.Options{NodeTimeout: 50 * time.Millisecond})
	const ttl = 600 * time.Millisecond
	var until, cancelled time.Time
	err := l.Do(t.Context(), "k", ttl, func(ctx context.Context, lease *redlock.Lease) error {
		until = lease.Until()
		for _, p := range proxies[:3] {
			p.SetBlackhole(true)
		}
		select {
		case <-ctx.Done():
			cancelled = time.Now()
			assert.ErrorIs(t, context.Cause(ctx), redlock.ErrLost)
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("fn's context was never cancelled")
		}
	})
	require.ErrorIs(t, err, redlock.ErrLost)
	require.ErrorIs(t, err, context.Canceled, "fn's error is joined")
	assert.True(t, cancelled.Before(until), "cancelled at %v, after Until %v", cancelled, until)
	for _, p := range proxies {
		p.SetBlackhole(false)
		p.DropConnections()
	}
}

func TestDoMaxHold(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second, MaxHold: 500 * time.Millisecond})
	start := time.Now()
	err := l.Do(t.Context(), "k", 200*time.Millisecond, func(ctx context.Context, _ *redlock.Lease) error {
		<-ctx.Done() // run until the lease is given up
		return nil
	})
	held := time.Since(start)
	require.ErrorIs(t, err, redlock.ErrLost)
	assert.Less(t, held, 500*time.Millisecond+time.Second, "held %v past MaxHold", held)
	assert.Greater(t, held, 200*time.Millisecond, "it was extended at least once")
}

func TestDone(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})

	t.Run("closes before validity runs out", func(t *testing.T) {
		lease, err := l.TryLock(t.Context(), "a", 200*time.Millisecond)
		require.NoError(t, err)
		select {
		case <-lease.Done():
			assert.Positive(t, lease.Validity(), "Done must close with a safety margin left")
		case <-time.After(5 * time.Second):
			t.Fatal("Done never closed")
		}
		_ = lease.Unlock(t.Context())
	})

	t.Run("extension moves it", func(t *testing.T) {
		lease, err := l.TryLock(t.Context(), "b", 300*time.Millisecond)
		require.NoError(t, err)
		done := lease.Done()
		require.NoError(t, lease.Extend(t.Context(), time.Minute))
		select {
		case <-done:
			t.Fatal("Done closed although the lease was extended")
		case <-time.After(500 * time.Millisecond):
		}
		require.NoError(t, lease.Unlock(t.Context()))
		<-done // closes on Unlock
	})

	t.Run("closes when the lease is found gone", func(t *testing.T) {
		lease, err := l.TryLock(t.Context(), "c", time.Minute)
		require.NoError(t, err)
		drain(t, l)
		for _, m := range c.servers {
			m.Del("c")
		}
		require.ErrorIs(t, lease.Check(t.Context()), redlock.ErrNotHeld)
		select {
		case <-lease.Done():
		default:
			t.Fatal("Done still open after Check found the lease gone")
		}
	})
}
