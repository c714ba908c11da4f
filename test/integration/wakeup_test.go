package integration

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/redlock/redlock/test/integration/procs"
)

// releaseChannel is the channel a key's releases are published on (the
// release script's, redlock/internal/notice.Channel): the key in a hash
// tag, unless it has one.
func releaseChannel(key string) string { return "{" + key + "}:redlock-released" }

// shardSubscribers is how many sharded subscribers key's release channel
// has on a server (PUBSUB SHARDNUMSUB).
func shardSubscribers(ctx context.Context, admin *redis.Client, key string) (int64, error) {
	m, err := admin.PubSubShardNumSub(ctx, releaseChannel(key)).Result()
	return m[releaseChannel(key)], err
}

// waitInBackground runs l.Lock(key) with a deadline of within; the result
// carries the time it returned.
type lockResult struct {
	err error
	at  time.Time
}

func waitInBackground(t *testing.T, l *redlock.Locker, key string, within time.Duration) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), within)
		defer cancel()
		lease, err := l.Lock(ctx, key, time.Minute)
		at := time.Now()
		if err == nil {
			err = lease.Unlock(ctx)
		}
		got <- lockResult{err, at}
	}()
	return got
}

// A Lock waiting in one Locker wins within moments of another Locker's
// Unlock, on five real servers, though its next poll is a minute away:
// the release script's SPUBLISH reached its sharded subscription on each
// node. Control: with NoWakeUps the same wait runs into its deadline.
func TestWaitersWakeAcrossLockers(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	patient := redlock.Options{NodeTimeout: time.Second, RetryDelay: time.Minute, RetryJitter: time.Millisecond}
	a := newLocker(t, c, &patient)
	for _, wake := range []bool{true, false} {
		name := map[bool]string{true: "wake-ups", false: "control-NoWakeUps"}[wake]
		t.Run(name, func(t *testing.T) {
			opts := patient
			opts.NoWakeUps = !wake
			b := newLocker(t, c, &opts)
			key := "it:wake:" + name
			held, err := a.TryLock(ctx, key, time.Minute)
			require.NoError(t, err)
			got := waitInBackground(t, b, key, 4*time.Second)
			if wake {
				for _, n := range c.Nodes {
					eventually(t, 5*time.Second, "a sharded subscriber on every node", func() (bool, error) {
						k, err := shardSubscribers(ctx, n.Admin, key)
						return k == 1, err
					})
				}
			} else {
				time.Sleep(200 * time.Millisecond) // b's attempt, and then its wait
			}
			released := time.Now()
			require.NoError(t, held.Unlock(ctx))
			r := <-got
			if !wake {
				require.ErrorIs(t, r.err, context.DeadlineExceeded, "without notices, the wait lasts until the poll")
				return
			}
			require.NoError(t, r.err)
			t.Logf("woken %v after the release", r.at.Sub(released))
			require.Less(t, r.at.Sub(released), 2*time.Second)
			for _, n := range c.Nodes {
				eventually(t, 5*time.Second, "no subscriber once no one waits", func() (bool, error) {
					k, err := shardSubscribers(ctx, n.Admin, key)
					return k == 0, err
				})
			}
			drain(t, b)
		})
	}
	drain(t, a)
}

// A waiter whose subscriber connections are killed (CLIENT KILL TYPE
// pubsub on every node) just before the release, whose notice is then
// lost, still wins at its poll; its subscriptions come back by themselves,
// and the next release wakes it at once again.
func TestKilledSubscriberFallsBackToPollingAndRecovers(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	a := newLocker(t, c, &redlock.Options{NodeTimeout: time.Second})
	const poll = 3 * time.Second
	b := newLocker(t, c, &redlock.Options{NodeTimeout: time.Second, RetryDelay: poll, RetryJitter: time.Millisecond})
	const key = "it:wake:killed"
	subscribed := func() {
		for _, n := range c.Nodes {
			eventually(t, 10*time.Second, "a sharded subscriber on every node", func() (bool, error) {
				k, err := shardSubscribers(ctx, n.Admin, key)
				return k == 1, err
			})
		}
	}

	held, err := a.TryLock(ctx, key, time.Minute)
	require.NoError(t, err)
	got := waitInBackground(t, b, key, 20*time.Second)
	subscribed()
	for _, n := range c.Nodes {
		require.NoError(t, n.Admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	}
	released := time.Now()
	require.NoError(t, held.Unlock(ctx))
	r := <-got
	require.NoError(t, r.err, "the poll found the key free")
	t.Logf("with its subscribers killed: won %v after the release (poll every %v)", r.at.Sub(released), poll)

	// Recovered: subscribed again, and woken at once.
	held, err = a.TryLock(ctx, key, time.Minute)
	require.NoError(t, err)
	got = waitInBackground(t, b, key, 20*time.Second)
	subscribed()
	released = time.Now()
	require.NoError(t, held.Unlock(ctx))
	r = <-got
	require.NoError(t, r.err)
	t.Logf("subscribed again: won %v after the release", r.at.Sub(released))
	require.Less(t, r.at.Sub(released), poll/2, "woken by the notice, not the poll")
	drain(t, a)
	drain(t, b)
}

// On a Redis Cluster node, the notice is sharded: the waiter subscribes
// (SSUBSCRIBE) on the master of the key's slot only, and the release's
// SPUBLISH wakes it there. Plain channels carry nothing.
func TestClusterNodeShardsItsNotices(t *testing.T) {
	ctx := t.Context()
	cluster := procs.StartCluster(t, harness.SuiteServer(), 3, 0)
	patient := &redlock.Options{NodeTimeout: 2 * time.Second, RetryDelay: time.Minute, RetryJitter: time.Millisecond}
	a := newLockerOn(t, []redlock.Node{cluster.Client(t)}, patient)
	b := newLockerOn(t, []redlock.Node{cluster.Client(t)}, patient)
	const key = "it:wake:cluster"
	cc := cluster.Client(t)
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	require.NoError(t, err)
	master, err := cluster.MasterOfSlot(ctx, slot)
	require.NoError(t, err)

	held, err := a.TryLock(ctx, key, time.Minute)
	require.NoError(t, err)
	got := waitInBackground(t, b, key, 10*time.Second)
	eventually(t, 5*time.Second, "a sharded subscriber on the slot's master", func() (bool, error) {
		k, err := shardSubscribers(ctx, master.Client, key)
		return k == 1, err
	})
	plain, err := master.Client.PubSubNumSub(ctx, releaseChannel(key)).Result()
	require.NoError(t, err)
	require.Zero(t, plain[releaseChannel(key)], "no plain subscriber")
	released := time.Now()
	require.NoError(t, held.Unlock(ctx))
	r := <-got
	require.NoError(t, r.err)
	t.Logf("woken %v after the release", r.at.Sub(released))
	require.Less(t, r.at.Sub(released), 5*time.Second)
	drain(t, a)
	drain(t, b)
}
