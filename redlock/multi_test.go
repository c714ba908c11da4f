package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A node grants a multi-key lease whole or not at all: for every subset of
// three nodes on which one of the keys is busy, the lease is won exactly
// when a majority is free, and no node holds a part of it, neither after a
// win (the busy nodes hold nothing of it) nor after a loss (the nodes that
// granted were released).
func TestMultiKeyLeaseIsAllOrNothingOnEverySubsetOfBusyNodes(t *testing.T) {
	keys := []string{"acct:1", "acct:2", "acct:3"}
	for _, fencing := range []bool{false, true} {
		for busyKey := range keys {
			for subset := range 1 << 3 {
				t.Run(fmt.Sprintf("fencing=%v/busy=%s/nodes=%03b", fencing, keys[busyKey], subset), func(t *testing.T) {
					c := newCluster(t, 3)
					l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: fencing})
					var busy []int
					for i := range 3 {
						if subset&(1<<i) != 0 {
							busy = append(busy, i)
						}
					}
					c.setOther(t, keys[busyKey], busy...)
					lease, err := l.TryLockMulti(t.Context(), []string{keys[2], keys[0], keys[1], keys[0]}, time.Minute)
					drain(t, l)
					if len(busy) >= 2 {
						require.ErrorIs(t, err, redlock.ErrNotObtained)
						for i, m := range c.servers {
							for _, k := range keys {
								if v, _ := m.Get(k); k != keys[busyKey] || subset&(1<<i) == 0 {
									assert.Empty(t, v, "node %d keeps %s of a lost multi-key attempt", i, k)
								}
							}
						}
						return
					}
					require.NoError(t, err)
					assert.Equal(t, keys, lease.Keys(), "sorted and distinct")
					assert.Equal(t, keys[0], lease.Key())
					for i := range 3 {
						for _, k := range keys {
							v, _ := c.servers[i].Get(k)
							switch {
							case subset&(1<<i) != 0 && k == keys[busyKey]:
								assert.Equal(t, "someone-else", v)
							case subset&(1<<i) != 0:
								assert.Empty(t, v, "node %d granted part of the lease (%s)", i, k)
							default:
								assert.Equal(t, lease.Value(), v, "node %d, key %s", i, k)
							}
						}
					}
					if fencing {
						for _, k := range keys {
							assert.NotZero(t, lease.TokenOf(k), k)
						}
						assert.Equal(t, lease.TokenOf(keys[0]), lease.Token())
						assert.Zero(t, lease.TokenOf("not-a-key"))
					}
					require.NoError(t, lease.Extend(t.Context(), time.Minute))
					require.NoError(t, lease.Check(t.Context()))
					require.NoError(t, lease.Unlock(t.Context()))
					drain(t, l)
					for i, m := range c.servers {
						for _, k := range keys {
							if v, _ := m.Get(k); v != "someone-else" {
								assert.Empty(t, v, "node %d keeps %s after Unlock", i, k)
							}
						}
					}
				})
			}
		}
	}
}

// Callers naming overlapping key sets in opposite orders, and single-key
// leases of the same keys, never hold a key together, and LockMulti with a
// deadline always returns: there is no partial lease to deadlock on.
func TestReversedKeyOrdersNeverBothWin(t *testing.T) {
	c := newCluster(t, 3)
	lockers := []*redlock.Locker{
		newLocker(t, c.nodes(nil), &redlock.Options{RetryDelay: time.Millisecond, RetryJitter: 2 * time.Millisecond}),
		newLocker(t, c.nodes(nil), &redlock.Options{RetryDelay: time.Millisecond, RetryJitter: 2 * time.Millisecond}),
	}
	sets := [][]string{{"a", "b"}, {"b", "a"}, {"b", "c", "a"}, {"a"}, {"c", "b"}}
	holders := map[string]*atomic.Int32{"a": {}, "b": {}, "c": {}}
	var overlaps, wins atomic.Int32
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			l := lockers[g%2]
			keys := sets[g%len(sets)]
			for range 15 {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				lease, err := l.LockMulti(ctx, keys, 10*time.Second)
				cancel()
				if err != nil {
					t.Errorf("LockMulti(%v): %v", keys, err)
					return
				}
				wins.Add(1)
				for _, k := range lease.Keys() {
					if holders[k].Add(1) > 1 {
						overlaps.Add(1)
					}
				}
				time.Sleep(100 * time.Microsecond)
				for _, k := range lease.Keys() {
					holders[k].Add(-1)
				}
				if err := lease.Unlock(t.Context()); err != nil {
					t.Errorf("Unlock(%v): %v", keys, err)
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "two leases held a key at once")
	assert.Equal(t, int32(6*15), wins.Load())
}

// The negative control of the test above: the same callers taking their
// keys one lock at a time, in the order they name them, deadlock: {a,b} and
// {b,a} each hold one key and wait for the other until their deadline.
func TestKeysLockedOneByOneInOppositeOrdersDeadlock(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{RetryDelay: time.Millisecond, RetryJitter: 2 * time.Millisecond})
	var first, second sync.WaitGroup
	first.Add(2)
	second.Add(2)
	var stuck atomic.Int32
	var wg sync.WaitGroup
	for _, keys := range [][]string{{"a", "b"}, {"b", "a"}} {
		wg.Go(func() {
			held, err := l.Lock(t.Context(), keys[0], time.Minute)
			first.Done()
			if err != nil {
				t.Error(err)
				return
			}
			defer held.Unlock(context.Background())
			first.Wait() // both hold their first key
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			next, err := l.Lock(ctx, keys[1], time.Minute)
			second.Done()
			second.Wait() // neither lets its first key go before both tried for their second
			if err == nil {
				_ = next.Unlock(context.Background())
			} else if errors.Is(err, context.DeadlineExceeded) {
				stuck.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(2), stuck.Load(), "both callers wait for the other's key")
}

// A multi-key lease's keys reach one Redis Cluster node in one script, so
// they must share a hash slot: otherwise the call fails at once, naming the
// keys and their slots, and sends nothing.
func TestMultiKeyLeaseOnAClusterNeedsOneSlot(t *testing.T) {
	c := newCluster(t, 2)
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { cl.Close() })
	l := newLocker(t, []redlock.Node{c.clients[0], c.clients[1], cl}, &redlock.Options{NodeTimeout: 200 * time.Millisecond})
	_, err := l.TryLockMulti(t.Context(), []string{"acct:1", "acct:2"}, time.Minute)
	require.ErrorContains(t, err, "different hash slots")
	require.ErrorContains(t, err, `"acct:1"`)
	require.NotErrorIs(t, err, redlock.ErrNotObtained)
	for i, m := range c.servers {
		assert.Empty(t, lockKeys(m), "node %d was sent something", i)
	}
	// One {tag}: one slot; the attempt goes out (and wins on the two
	// servers that answer).
	lease, err := l.TryLockMulti(t.Context(), []string{"{acct}:1", "{acct}:2"}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(t.Context()))
}

// Every bad argument gets an error naming it, and nothing is sent.
func TestMultiKeyLeaseRefusesBadArguments(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	many := make([]string, redlock.MaxMultiKeys+1)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	for _, tc := range []struct {
		keys []string
		ttl  time.Duration
		want string
	}{
		{nil, time.Minute, "no keys"},
		{[]string{"a", ""}, time.Minute, "empty key"},
		{[]string{"a", "{b}:fencing"}, time.Minute, "reserved"},
		{[]string{"a", "x}y"}, time.Minute, "hash tag"},
		{[]string{"a", "b"}, 0, "must be positive"},
		{many, time.Minute, "MaxMultiKeys"},
	} {
		_, err := l.TryLockMulti(t.Context(), tc.keys, tc.ttl)
		require.ErrorContains(t, err, tc.want, "%v", tc.keys)
		require.NotErrorIs(t, err, redlock.ErrNotObtained)
		_, err = l.LockMulti(t.Context(), tc.keys, tc.ttl)
		require.ErrorContains(t, err, tc.want, "%v", tc.keys)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	_, err := l.TryLockMulti(nil, []string{"a", "b"}, time.Minute) //nolint:staticcheck
	require.ErrorContains(t, err, "nil context")
	var nilLocker *redlock.Locker
	_, err = nilLocker.TryLockMulti(t.Context(), []string{"a", "b"}, time.Minute)
	require.ErrorContains(t, err, "nil *Locker")
	for i, m := range c.servers {
		assert.Empty(t, lockKeys(m), "node %d was sent something", i)
	}
	// One distinct key is an ordinary lease.
	lease, err := l.TryLockMulti(t.Context(), []string{"solo", "solo"}, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"solo"}, lease.Keys())
	assert.Equal(t, lease.Token(), lease.TokenOf("solo"))
	require.NoError(t, lease.Unlock(t.Context()))
}

// Each key's tokens come from the key's own counter, shared with its
// single-key leases: a resource guarded by a's tokens sees them grow across
// single-key and multi-key leases of a.
func TestMultiKeyTokensGrowWithTheKeysSingleLeases(t *testing.T) {
	c := newCluster(t, 5)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	var lastA, lastB uint64
	for i := range 6 {
		switch i % 3 {
		case 0, 1:
			lease, err := l.TryLockMulti(t.Context(), []string{"b", "a"}, time.Minute)
			require.NoError(t, err)
			require.Greater(t, lease.TokenOf("a"), lastA, "round %d", i)
			require.Greater(t, lease.TokenOf("b"), lastB, "round %d", i)
			lastA, lastB = lease.TokenOf("a"), lease.TokenOf("b")
			require.NoError(t, lease.Unlock(t.Context()))
		case 2:
			lease, err := l.TryLock(t.Context(), "a", time.Minute)
			require.NoError(t, err)
			require.Greater(t, lease.Token(), lastA, "round %d", i)
			lastA = lease.Token()
			require.NoError(t, lease.Unlock(t.Context()))
		}
	}
	drain(t, l)
	for i, m := range c.servers {
		a, _ := m.Get("{a}:fencing")
		b, _ := m.Get("{b}:fencing")
		assert.Equal(t, "6", a, "node %d", i)
		assert.Equal(t, "4", b, "node %d", i)
	}
}

// A multi-key lease is extended, checked and lost as a whole: a key that a
// node forgot is healed with the others; a key replaced on a majority, or
// revoked by an operator, loses the lease; its Done closes, and Do's work
// is cancelled with ErrLost.
func TestMultiKeyLeaseIsExtendedCheckedAndLostAsAWhole(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), nil)
	keys := []string{"x", "y"}

	lease, err := l.TryLockMulti(t.Context(), keys, time.Minute)
	require.NoError(t, err)
	c.servers[0].Del("y") // the node forgot one key
	require.NoError(t, lease.Extend(t.Context(), time.Minute))
	drain(t, l) // the extension decided on a majority: node 0's may still be on its way
	assert.Equal(t, []int{0, 1, 2}, c.holding("y", lease.Value()), "healed with the others")
	assert.Greater(t, c.servers[0].TTL("x"), 50*time.Second)

	c.setOther(t, "y", 0, 1) // replaced on a majority
	err = lease.Check(t.Context())
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	select {
	case <-lease.Done():
	default:
		t.Fatal("Done not closed")
	}
	assert.Equal(t, []int{0, 1, 2}, c.holding("x", lease.Value()), "x is left until released")
	_ = lease.Unlock(t.Context())
	for _, i := range []int{0, 1} {
		v, _ := c.servers[i].Get("y")
		assert.Equal(t, "someone-else", v, "another's value is never deleted")
	}
	for _, m := range c.servers {
		m.Del("y")
	}

	// Revoked while running under Do.
	lease, err = l.LockMulti(t.Context(), keys, 300*time.Millisecond)
	require.NoError(t, err)
	err = lease.Do(t.Context(), 300*time.Millisecond, func(ctx context.Context, _ *redlock.Lease) error {
		if _, err := l.Revoke(ctx, "y"); err != nil {
			return err
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, redlock.ErrLost)
	drain(t, l)
	for i, m := range c.servers {
		for _, k := range keys {
			assert.False(t, m.Exists(k), "node %d keeps %s", i, k)
		}
	}
}

// A multi-key release reaches Lock calls waiting for one of its keys in
// another Locker at once, through the keys' release notices, rather than at
// their next poll.
func TestMultiKeyUnlockWakesWaitersOfEachKey(t *testing.T) {
	c := newCluster(t, 3)
	holder := newLocker(t, c.nodes(nil), nil)
	waiter := newLocker(t, c.nodes(nil), &redlock.Options{RetryDelay: time.Minute})
	lease, err := holder.TryLockMulti(t.Context(), []string{"p", "q"}, time.Minute)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		l, err := waiter.Lock(ctx, "q", time.Minute)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return redlock.Listening(waiter, "q") > 0 }, 10*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // let the waiter's attempt after listening come back refused
	require.NoError(t, lease.Unlock(t.Context()))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter was not woken by the multi-key release (its poll is a minute)")
	}
}

func TestMultiKeyErrorsNameEveryKey(t *testing.T) {
	c := newCluster(t, 3)
	// The caller gives up once an attempt was decided (not after a time
	// that a loaded host may spend before the first reply).
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	decided := redlock.ObserverFunc(func(e redlock.Event) {
		if e.Op == redlock.OpAcquire && errors.Is(e.Err, redlock.ErrNotObtained) {
			cancel()
		}
	})
	l := newLocker(t, c.nodes(nil), &redlock.Options{RetryDelay: time.Millisecond, Observer: decided})
	c.setOther(t, "n", 0, 1, 2)
	_, err := l.LockMulti(ctx, []string{"n", "m"}, time.Minute)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.True(t, strings.Contains(err.Error(), `{"m", "n"}`), err.Error())
}

// Multi-key leases at their edges: RequireDurable with multi-key fencing,
// malformed input, keys that share a fencing counter, errors that name
// every key of the lease, and an acquisition resent by the client.

// With Options.RequireDurable, a fenced acquisition refuses nodes that do
// not show they keep their counters (miniredis has no CONFIG GET): TryLock
// does, and so must a multi-key lease, whose tokens come from the same
// counters.
func TestMultiKeyFencingHonoursRequireDurable(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true, RequireDurable: true})
	_, err := l.TryLock(t.Context(), "a", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotDurable, "the single-key control")

	lease, err := l.TryLockMulti(t.Context(), []string{"a", "b"}, time.Minute)
	if err == nil {
		t.Errorf("TryLockMulti issued tokens a=%d b=%d from nodes not known to keep their counters", lease.TokenOf("a"), lease.TokenOf("b"))
		_ = lease.Unlock(t.Context())
	}
	require.ErrorIs(t, err, redlock.ErrNotDurable)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	lease, err = l.LockMulti(ctx, []string{"a", "b"}, time.Minute)
	if err == nil {
		_ = lease.Unlock(t.Context())
	}
	require.ErrorIs(t, err, redlock.ErrNotDurable)
}

// Every malformed call fails at once with an error naming what is wrong,
// sends nothing and does not panic; nil leases answer as holding nothing.
func TestMultiKeyBadInputNeitherPanicsNorSends(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	long := strings.Repeat("k", redlock.MaxKeyLen+1)
	many := make([]string, 0, 2*redlock.MaxMultiKeys+2)
	for i := range redlock.MaxMultiKeys + 1 {
		many = append(many, fmt.Sprint("k", i), fmt.Sprint("k", i))
	}
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{[]string{}, "no keys"},
		{[]string{"a", "{a}:fencing"}, "reserved"},
		{[]string{"a", "{a}:redlock-waiters"}, "reserved"},
		{[]string{"a", "a:{t}:fencing"}, "reserved"},
		{[]string{"a", long}, "MaxKeyLen"},
		{[]string{"a", "}"}, "hash tag"},
		{many, "MaxMultiKeys"},
	} {
		_, err := l.TryLockMulti(t.Context(), tc.keys, time.Minute)
		require.ErrorContains(t, err, tc.want, "%q", tc.keys)
		require.NotErrorIs(t, err, redlock.ErrNotObtained)
	}
	for i, m := range c.servers {
		assert.Empty(t, lockKeys(m), "node %d was sent something", i)
	}

	// At the limit: MaxMultiKeys distinct keys, each named twice, with braces.
	limit := make([]string, 0, 2*redlock.MaxMultiKeys)
	for i := range redlock.MaxMultiKeys {
		limit = append(limit, fmt.Sprintf("{t}%d", i), fmt.Sprintf("{t}%d", i))
	}
	lease, err := l.TryLockMulti(t.Context(), limit, time.Minute)
	require.NoError(t, err)
	require.Len(t, lease.Keys(), redlock.MaxMultiKeys)
	for _, k := range lease.Keys() {
		require.NotZero(t, lease.TokenOf(k), k)
	}
	require.NoError(t, lease.Extend(t.Context(), time.Minute))
	require.NoError(t, lease.Check(t.Context()))
	worker := otherLocker(t, c, &redlock.Options{Fencing: true})
	resumed, err := worker.Resume(t.Context(), lease.Handle())
	require.NoError(t, err)
	require.NoError(t, resumed.Unlock(t.Context()))
	drain(t, worker)
	for i, m := range c.servers {
		assert.Empty(t, keysLeft(m), "node %d", i)
	}

	var nilLease *redlock.Lease
	assert.Nil(t, nilLease.Keys())
	assert.Zero(t, nilLease.TokenOf("a"))
	assert.Equal(t, redlock.Handle{}, nilLease.Handle())
	require.ErrorContains(t, nilLease.Do(t.Context(), time.Second, func(context.Context, *redlock.Lease) error { return nil }), "nil *Lease")
	_, err = l.Resume(t.Context(), nilLease.Handle())
	require.ErrorContains(t, err, "no keys")
	var nilLocker *redlock.Locker
	_, err = nilLocker.Resume(t.Context(), redlock.Handle{Keys: []string{"a"}, Value: "v"})
	require.ErrorContains(t, err, "nil *Locker")
	_, err = nilLocker.LockMulti(t.Context(), []string{"a", "b"}, time.Minute)
	require.ErrorContains(t, err, "nil *Locker")

	held, err := l.TryLockMulti(t.Context(), []string{"x", "y"}, time.Minute)
	require.NoError(t, err)
	h := held.Handle()
	h.Keys = append(h.Keys, "")
	h.Tokens = append(h.Tokens, 1)
	_, err = l.Resume(t.Context(), h)
	require.ErrorContains(t, err, "sorted and distinct") // "" sorts first
	h = held.Handle()
	h.Nodes = nil
	_, err = l.Resume(t.Context(), h)
	require.ErrorIs(t, err, redlock.ErrOtherNodes)
	require.ErrorContains(t, held.Do(t.Context(), time.Second, nil), "nil function")
	require.NoError(t, held.Unlock(t.Context()))
}

// A key and the same key wrapped in braces ("x" and "{x}") are two locks
// that share one fencing counter (hashtag.Beside gives both "{x}:fencing").
// Named together in one multi-key lease, and mixed with single-key leases
// of either, each key's tokens still grow and never repeat.
func TestKeysSharingACounterKeepTheirTokensOrdered(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	last := map[string]uint64{}
	seen := map[string]map[uint64]bool{"x": {}, "{x}": {}}
	for i := range 6 {
		var keys []string
		switch i % 3 {
		case 0:
			keys = []string{"{x}", "x"}
		case 1:
			keys = []string{"x"}
		case 2:
			keys = []string{"{x}"}
		}
		lease, err := l.TryLockMulti(t.Context(), keys, time.Minute)
		require.NoError(t, err)
		for _, k := range lease.Keys() {
			tok := lease.TokenOf(k)
			require.Greater(t, tok, last[k], "round %d key %s", i, k)
			require.False(t, seen[k][tok], "round %d key %s token %d again", i, k, tok)
			last[k], seen[k][tok] = tok, true
		}
		require.NoError(t, lease.Unlock(t.Context()))
	}
}

// A multi-key round that fails names the lease's keys, not only the first:
// here b is the busy key, and the error of every operation must say so
// (QuorumError.Key is the first key, "a", which is free).
func TestMultiKeyRoundErrorsNameEveryKey(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), nil)
	c.setOther(t, "b", 0, 1)
	_, err := l.TryLockMulti(t.Context(), []string{"a", "b"}, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Contains(t, err.Error(), `"b"`, "TryLockMulti")
	for _, m := range c.servers {
		m.Del("b")
	}

	lease, err := l.TryLockMulti(t.Context(), []string{"a", "b"}, time.Minute)
	require.NoError(t, err)
	drain(t, l)
	h := lease.Handle()
	c.setOther(t, "b", 0, 1)
	for _, op := range []struct {
		name string
		run  func() error
	}{ // Check's refusal loses the lease, so it goes after Resume
		{"Resume", func() error { _, err := l.Resume(t.Context(), h); return err }},
		{"Check", func() error { return lease.Check(t.Context()) }},
		{"Unlock", func() error { return lease.Unlock(t.Context()) }},
	} {
		err := op.run()
		require.ErrorIs(t, err, redlock.ErrNotHeld, op.name)
		assert.Contains(t, err.Error(), `"b"`, op.name)
	}
}

// A multi-key acquisition whose reply is lost is resent by go-redis; the
// resent script finds every key already holding its value and must return
// the counters without incrementing them again (acquire.lua's
// "mine" path), and the lease is granted with t=1 for every key.
func TestMultiKeyFencingSurvivesClientRetries(t *testing.T) {
	c := newCluster(t, 3)
	proxies, nodes := c.proxied(t)
	l := newLocker(t, nodes, &redlock.Options{Fencing: true, NodeTimeout: 5 * time.Second})
	for _, p := range proxies {
		p.CutReplies(1)
	}
	lease, err := l.TryLockMulti(t.Context(), []string{"a", "b", "c"}, time.Minute)
	require.NoError(t, err)
	drain(t, l)
	for _, k := range lease.Keys() {
		assert.Equal(t, uint64(1), lease.TokenOf(k)>>8, k)
		for i, m := range c.servers {
			v, _ := m.Get("{" + k + "}:fencing")
			assert.Equal(t, "1", v, "node %d counted the retried acquisition of %s twice", i, k)
		}
	}
	require.NoError(t, lease.Unlock(t.Context()))
}
