package redlock_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/redlock"
)

// A Lock on a Locker with a Redis Cluster node that hangs (blackholed,
// slot map not loaded) returns at its context's deadline, as it does with
// NoWakeUps (control). It once overran it: Hub.Listen ran the node's
// Source (ClusterClient.MasterForKey) synchronously, under the Hub's own
// Timeout (max(NodeTimeout, 1s)), not the caller's ctx.
func TestALockWithAHangingClusterNodeReturnsAtItsDeadline(t *testing.T) {
	for _, wake := range []bool{true, false} {
		name := map[bool]string{true: "wake-ups", false: "control-NoWakeUps"}[wake]
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3)
			a := newLocker(t, c.nodes(nil), patient)
			_, err := a.TryLock(t.Context(), "job", time.Minute)
			require.NoError(t, err)

			p, err := faultnet.Listen(c.servers[2].Addr())
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() })
			p.SetBlackhole(true)
			// Timeouts of a second, past the 700ms this test allows Lock,
			// so that Drain at its end does not wait out go-redis's longer
			// defaults on the black-holed node.
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{p.Addr()}, MaxRetries: -1, MaxRedirects: -1,
				DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
			t.Cleanup(func() { cc.Close() })
			nodes := c.nodes(nil)
			nodes[2] = cc
			b := newLocker(t, nodes, &redlock.Options{NodeTimeout: 100 * time.Millisecond, RetryDelay: time.Minute, RetryJitter: time.Millisecond, NoWakeUps: !wake})

			ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err = b.Lock(ctx, "job", time.Minute)
			took := time.Since(start)
			require.Error(t, err)
			require.Less(t, took, 700*time.Millisecond, "Lock with a 400ms context returned after %v (%v)", took, err)
		})
	}
}

// A lease of this Locker expires (never unlocked); another process then
// takes the key and releases it: the release's notice reaches this Locker
// (its waiter listens) and wakes its head. (The expired lease once left
// the queue marked held: Queues.Notice dropped the notice as "old", and
// the head slept to its poll, a minute.)
func TestANoticeAfterTheLockersOwnLeaseExpiredWakesItsWaiter(t *testing.T) {
	c := newCluster(t, 3)
	a := newLocker(t, c.nodes(nil), patient) // the Locker under test
	b := newLocker(t, c.nodes(nil), patient) // another process
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// b holds; a has two Lock calls waiting (both listen).
	held, err := b.TryLock(ctx, "job", time.Minute)
	require.NoError(t, err)
	won := make(chan *redlock.Lease, 1)
	go func() {
		l, err := a.Lock(ctx, "job", 2*time.Second)
		if err != nil {
			t.Error(err)
		}
		won <- l // never unlocked: it will expire
	}()
	waitFor(t, a, "job", 1)
	gotSecond := lockSoon(t, a, "job", 6*time.Second)
	waitFor(t, a, "job", 2)
	require.Eventually(t, func() bool { return redlock.Listening(a, "job") == 3 }, 5*time.Second, time.Millisecond)

	require.NoError(t, held.Unlock(ctx)) // the notice wakes a's head, which wins
	<-won
	waitFor(t, a, "job", 1)
	time.Sleep(50 * time.Millisecond) // the second, now head, waits for a's lease
	require.Equal(t, 3, redlock.Listening(a, "job"), "a still listens")
	for _, m := range c.servers {
		m.FastForward(3 * time.Second) // a's lease expires, unreleased
	}
	other, err := b.TryLock(ctx, "job", time.Minute) // another process takes it
	require.NoError(t, err)
	require.NoError(t, other.Unlock(ctx)) // and releases: the notice goes out
	select {
	case err := <-gotSecond:
		require.NoError(t, err)
	case <-time.After(3 * time.Second):
		t.Fatal("the key was released by another process while a's waiter listened, but a's head was not woken: Queues.Notice dropped it, the queue still counts a's expired lease as holding the key")
	}
}

// A subscriber node that hangs while subscribed, then every Lock returns:
// no subscriber connection, and no goroutine, is left.
func TestABlackholedSubscriberLeavesNoConnectionOrGoroutine(t *testing.T) {
	c := newCluster(t, 3)
	proxies, nodes := c.proxied(t)
	a := newLocker(t, c.nodes(nil), patient)
	held, err := a.TryLock(t.Context(), "job", time.Minute)
	require.NoError(t, err)
	b := newLocker(t, nodes, &redlock.Options{NodeTimeout: 200 * time.Millisecond, RetryDelay: time.Minute, RetryJitter: time.Millisecond})
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
			defer cancel()
			if l, err := b.Lock(ctx, "job", time.Minute); err == nil {
				l.Unlock(ctx)
			}
		}()
	}
	waitFor(t, b, "job", 8)
	require.Eventually(t, func() bool { return redlock.Listening(b, "job") == 3 }, 5*time.Second, time.Millisecond)
	proxies[0].SetBlackhole(true)
	proxies[1].SetDown(true)
	wg.Wait()
	require.Eventually(t, func() bool { return redlock.Subscribers(b) == 0 }, 5*time.Second, 10*time.Millisecond, "subscribers left: %d", redlock.Subscribers(b))
	proxies[0].SetBlackhole(false)
	proxies[1].SetDown(false)
	require.NoError(t, held.Unlock(t.Context()))
	time.Sleep(3 * time.Second)
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var ours []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/notice.") {
			ours = append(ours, g)
		}
	}
	require.Empty(t, ours, "notice goroutines left after every Lock returned (%d before, %d now in all)", before, runtime.NumGoroutine())
}
