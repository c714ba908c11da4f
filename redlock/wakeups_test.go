package redlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/redlock/internal/notice"
)

// twoLockers returns two Lockers (two processes, as far as the queue
// knows) on the same three in-process nodes, b with opts, and a lease of
// key held by a.
func twoLockers(t *testing.T, key string, opts redlock.Options) (a, b *redlock.Locker, held *redlock.Lease) {
	t.Helper()
	c := newCluster(t, 3)
	a = newLocker(t, c.nodes(nil), patient)
	b = newLocker(t, c.nodes(nil), &opts)
	held, err := a.TryLock(t.Context(), key, time.Minute)
	require.NoError(t, err)
	return a, b, held
}

// lockSoon runs l.Lock(key) with a deadline of within, in the background.
func lockSoon(t *testing.T, l *redlock.Locker, key string, within time.Duration) <-chan error {
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), within)
		defer cancel()
		lease, err := l.Lock(ctx, key, time.Minute)
		if err == nil {
			err = lease.Unlock(ctx)
		}
		got <- err
	}()
	return got
}

// A Lock waiting in one Locker wins as soon as another Locker releases the
// key, long before its next poll (a minute away): the release's notice
// woke it. Control: with NoWakeUps the same wait runs into its deadline.
func TestLockWakesOnAnotherLockersRelease(t *testing.T) {
	for _, wake := range []bool{true, false} {
		name := map[bool]string{true: "wake-ups", false: "control-NoWakeUps"}[wake]
		t.Run(name, func(t *testing.T) {
			opts := *patient
			opts.NoWakeUps = !wake
			a, b, held := twoLockers(t, "job", opts)
			got := lockSoon(t, b, "job", 3*time.Second)
			waitFor(t, b, "job", 1)
			if wake {
				require.Eventually(t, func() bool { return redlock.Listening(b, "job") == 3 }, 5*time.Second, time.Millisecond, "subscribed on every node")
				assert.Equal(t, 3, redlock.Subscribers(b), "one subscriber connection per node")
			} else {
				time.Sleep(100 * time.Millisecond) // its attempt, and then the wait
				assert.Zero(t, redlock.Subscribers(b))
			}
			require.NoError(t, held.Unlock(t.Context()))
			err := <-got
			if wake {
				require.NoError(t, err, "woken by the release")
				require.Eventually(t, func() bool { return redlock.Subscribers(b) == 0 }, 5*time.Second, time.Millisecond, "no waiter left: no subscriber connection")
			} else {
				require.ErrorIs(t, err, context.DeadlineExceeded, "without notices, the wait lasts until the poll")
			}
			drain(t, a)
		})
	}
}

// A lease that expires publishes nothing: the waiter still wins, at its
// poll, on a context without a deadline.
func TestLockPollsWhenNoNoticeComes(t *testing.T) {
	c := newCluster(t, 3)
	a := newLocker(t, c.nodes(nil), patient)
	b := newLocker(t, c.nodes(nil), &redlock.Options{RetryDelay: 100 * time.Millisecond, RetryJitter: time.Millisecond})
	_, err := a.TryLock(t.Context(), "job", 300*time.Millisecond) // never released
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		lease, err := b.Lock(context.Background(), "job", time.Minute) // no deadline
		if err == nil {
			err = lease.Unlock(context.Background())
		}
		done <- err
	}()
	waitFor(t, b, "job", 1)
	for _, m := range c.servers {
		m.FastForward(time.Second) // the key expires on every node, silently
	}
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Lock never won a key that expired: it waited for a notice that does not come")
	}
}

// The lost wake-up: a release that lands after the attempt that found the
// key taken and before the subscription is not missed, because the
// waiter tries once more once subscribed. Control: without that attempt,
// the release is lost and the waiter sleeps to its deadline.
func TestReleaseBeforeTheSubscriptionIsNotMissed(t *testing.T) {
	for _, retry := range []bool{true, false} {
		name := map[bool]string{true: "retry-after-listen", false: "control-no-retry"}[retry]
		t.Run(name, func(t *testing.T) {
			var a *redlock.Locker
			var held *redlock.Lease
			hooks := unsafelocker.Hooks{NoRetryAfterListen: !retry, BeforeListen: func() {
				if err := held.Unlock(context.Background()); err != nil {
					t.Error(err)
				}
				// Every node's release lands before the Listen: Unlock
				// returns once a majority's has, and a release that
				// reached a node after its subscription would wake the
				// control's waiter.
				if err := a.Drain(context.Background()); err != nil {
					t.Error(err)
				}
			}}
			a, b, held := twoLockers(t, "job", *withHooks(patient, hooks))
			err := <-lockSoon(t, b, "job", 2*time.Second)
			if retry {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, context.DeadlineExceeded, "the release before the subscription was lost")
			}
			drain(t, a)
		})
	}
}

// A release reaches the nodes at different times. Its notices from nodes
// 0 and 1 (a majority) wake the waiter, whose attempt is granted on node
// 0, finds the released value still on node 2 (its release is late) and
// stops waiting for node 1 (slow to answer: it yields), so it loses. When
// node 2's release comes, its notice wakes the waiter again, and it wins
// long before its poll (a minute away); once, that last notice was taken
// for a repeat of a release already delivered, and the waiter slept to its
// deadline.
func TestAWaiterWhoseAttemptRacedTheReleaseIsWokenByItsLastNode(t *testing.T) {
	c := newCluster(t, 3)
	releaseOnNode2 := make(chan struct{})
	var openNode2 sync.Once
	defer openNode2.Do(func() { close(releaseOnNode2) })
	a := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
		if i != 2 {
			return n
		}
		return &hookNode{Node: n, beforeScript: func(ctx context.Context, keys []string, args []any) error {
			if len(keys) > 1 { // a lease's release (the key and its line), not the acquisition's
				<-releaseOnNode2
			}
			return nil
		}}
	}), patient)
	held, err := a.TryLock(t.Context(), "job", time.Minute)
	require.NoError(t, err)

	slow, err := faultnet.Listen(c.servers[1].Addr()) // the waiter's way to node 1
	require.NoError(t, err)
	t.Cleanup(func() { slow.Close() })
	bNodes := c.nodes(nil)
	bNodes[1] = newClient(t, slow.Addr())
	var raced atomic.Bool // the release has begun: the waiter's next loss is the race
	var lost atomic.Int32
	obs := redlock.ObserverFunc(func(e redlock.Event) {
		if e.Op == redlock.OpAcquire && e.Err != nil && raced.Load() {
			lost.Add(1)
			slow.SetDelay(0, 0)
			openNode2.Do(func() { close(releaseOnNode2) })
		}
	})
	opts := *patient
	opts.NodeTimeout, opts.Observer = 5*time.Second, obs
	b := newLocker(t, bNodes, &opts)
	got := lockSoon(t, b, "job", 8*time.Second)
	waitFor(t, b, "job", 1)
	require.Eventually(t, func() bool { return redlock.Listening(b, "job") == 3 }, 5*time.Second, time.Millisecond, "subscribed on every node")
	line, _ := notice.Line("job")
	for i, m := range c.servers {
		require.Eventually(t, func() bool { l, _ := m.List(line); return len(l) == 1 }, 5*time.Second, time.Millisecond, "the waiter in node %d's line", i)
	}

	slow.SetDelay(2*time.Second, 0) // node 1 answers the waiter's next attempt late
	raced.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- held.Unlock(context.Background()) }()
	require.NoError(t, <-got, "woken again by node 2's notice")
	require.EqualValues(t, 1, lost.Load(), "the attempt woken by the first notices lost (the race this test is about)")
	require.NoError(t, <-unlocked)
	drain(t, a)
	drain(t, b)
}
