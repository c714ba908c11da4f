package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// A key's line ({KEY}:redlock-waiters, a list) is reserved, as the key's
// fencing counter and tombstone are (checkKey). Were it a name a lock could
// take, while "job" is contended a lock named "{job}:redlock-waiters" could
// not be had: SET NX GET on the list is refused (WRONGTYPE) on every node,
// so TryLock would fail as if every node were down, and Lock would retry
// until its context ends. Control: the fencing counter's name is refused
// up front as reserved. (It failed so before checkKey knew the line.)
func TestALineNameIsReservedAsALockName(t *testing.T) {
	c := newCluster(t, 3)
	a := newLocker(t, c.nodes(nil), patient)
	b := newLocker(t, c.nodes(nil), patient)
	held, err := a.TryLock(t.Context(), "job", time.Minute)
	require.NoError(t, err)
	// b waits through the subtests below as well, and gets the lock once a
	// releases it: its bound is for a hang, not a measure (on a loaded
	// machine the subtests alone took seconds).
	got := lockSoon(t, b, "job", 30*time.Second)
	require.Eventually(t, func() bool { return inLine(c, "job", b) == 3 }, 5*time.Second, time.Millisecond, "b joined the line on every node")

	for _, tc := range []struct{ name, key string }{
		{"control-fencing-counter", "{job}:fencing"},
		{"line", "{job}:redlock-waiters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lease, err := a.TryLock(t.Context(), tc.key, time.Minute)
			if err == nil {
				assert.NoError(t, lease.Unlock(t.Context()))
				return // a lock by that name works: no collision
			}
			assert.ErrorContains(t, err, "reserved", "a lock named like a line must be refused as reserved (or work); got a failure on every node")
			var q *redlock.QuorumError
			assert.False(t, errors.As(err, &q), "not a node failure: %v", err)
		})
	}
	require.NoError(t, held.Unlock(t.Context()))
	require.NoError(t, <-got)
	drain(t, a)
	drain(t, b)
}

// gaveUp cancels a Lock's context when its n-th attempt has failed: the
// Observer's OpAcquire event comes before the attempt returns to Lock.
type gaveUp struct {
	mu     sync.Mutex
	n      int
	at     int
	cancel context.CancelFunc
}

func (g *gaveUp) Observe(e redlock.Event) {
	if e.Op != redlock.OpAcquire || e.Err == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	if g.n == g.at {
		g.cancel()
	}
}

func (g *gaveUp) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// A Lock named by a release on some nodes only (nodes' lines may differ:
// joins are sent to each node separately and race with other Lockers'),
// whose named attempt then loses and whose context ends, leaves its
// Locker's place in the lines of the nodes that did not name it too, as
// TestAWaiterThatGivesUpLeavesTheLine asks: otherwise the next release
// there names a Locker with no waiter, costing the other Lockers a poll
// (TestATurnNamedForAGoneLockerCostsOnePoll). (The named turn once made
// Lock forget it had joined, and it left no line.)
func TestAWaiterNamedOnSomeNodesThatGivesUpLeavesTheLine(t *testing.T) {
	c := newCluster(t, 3)
	const line = "{job}:redlock-waiters"
	c.setOther(t, "job", 0, 1, 2) // held by another process's lease throughout
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	g := &gaveUp{at: 3, cancel: cancel} // attempts 1 and 2 find it taken; 3 is the named one
	b := newLocker(t, c.nodes(nil), &redlock.Options{RetryDelay: time.Minute, RetryJitter: time.Millisecond, Observer: g})
	got := make(chan error, 1)
	go func() {
		_, err := b.Lock(ctx, "job", time.Minute)
		got <- err
	}()
	require.Eventually(t, func() bool { return inLine(c, "job", b) == 3 }, 5*time.Second, time.Millisecond, "b joined the line on every node")
	require.Equal(t, 2, g.count())
	// Another Locker joined node 2's line first.
	_, err := c.servers[2].Lpush(line, "other")
	require.NoError(t, err)
	// The other process releases: each node pops its line's head and names
	// it, as release.lua does (the key stays taken here, as if a third
	// process took it first: b's named attempt loses).
	for i, cl := range c.clients {
		next, err := cl.LPop(t.Context(), line).Result()
		require.NoError(t, err)
		if i < 2 {
			require.Equal(t, redlock.ID(b), next)
		} else {
			require.Equal(t, "other", next)
		}
		require.NoError(t, cl.Eval(t.Context(), `
local r = redis.pcall("SPUBLISH", KEYS[1], ARGV[1])
if type(r) == "table" and r.err then redis.pcall("PUBLISH", KEYS[1], ARGV[1]) end
return 1`, []string{"{job}:redlock-released"}, "someone-else\n"+next).Err())
	}
	require.ErrorIs(t, <-got, context.Canceled)
	require.Equal(t, 3, g.count(), "b tried once more, at its named turn, and gave up")
	drain(t, b)
	assert.Equal(t, 0, inLine(c, "job", b), "b gave up: its place is left in no node's line")
}

// unlockGate is a node (a *redis.Client, so that its Locker still
// subscribes to it) whose Unlock scripts (ARGV[2] "notify") run before
// and after hooks.
type unlockGate struct {
	*redis.Client
	before, after func()
}

func (u *unlockGate) gate(args []any, f func()) {
	if len(args) > 1 && args[1] == "notify" && f != nil {
		f()
	}
}

func (u *unlockGate) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	u.gate(args, u.before)
	defer u.gate(args, u.after)
	return u.Client.EvalSha(ctx, sha, keys, args...)
}

func (u *unlockGate) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	u.gate(args, u.before)
	defer u.gate(args, u.after)
	return u.Client.Eval(ctx, src, keys, args...)
}

// One node of three names a place in its line (a Locker gone, or one
// whose place the others' releases already took: lines differ between
// nodes), two name no one. The releasing Locker's own waiter tries at
// once: a turn is passed only when most of the released nodes named
// another Locker. (One node's naming once passed the turn, and the
// waiter sat out a full poll with the key free everywhere.)
// Node 0's reply is made to come first. Control: with no stale place the
// waiter tries at once.
func TestATurnNamedOnAMinorityDoesNotPassTheReleasersTurn(t *testing.T) {
	for _, stale := range []bool{true, false} {
		name := map[bool]string{true: "one-node-names-a-gone-locker", false: "control-empty-lines"}[stale]
		t.Run(name, func(t *testing.T) {
			const poll = 3 * time.Second
			c := newCluster(t, 3)
			node0 := make(chan struct{})
			var once sync.Once
			nodes := c.nodes(func(i int, n redlock.Node) redlock.Node {
				u := &unlockGate{Client: n.(*redis.Client)}
				if i == 0 {
					u.after = func() { once.Do(func() { close(node0) }) }
				} else {
					u.before = func() { <-node0 }
				}
				return u
			})
			a := newLocker(t, nodes, &redlock.Options{RetryDelay: poll, RetryJitter: time.Millisecond})
			ctx, cancel := context.WithTimeout(t.Context(), 3*poll)
			defer cancel()
			held, err := a.TryLock(ctx, "job", time.Minute)
			require.NoError(t, err)
			got := lockSoon(t, a, "job", 3*poll)
			require.Eventually(t, func() bool { return inLine(c, "job", a) == 3 }, 5*time.Second, time.Millisecond, "a's waiter joined the line on every node")
			if stale {
				_, err := c.servers[0].Lpush("{job}:redlock-waiters", "gone")
				require.NoError(t, err)
			}
			start := time.Now()
			require.NoError(t, held.Unlock(ctx))
			require.NoError(t, <-got)
			waited := time.Since(start)
			assert.Less(t, waited, poll/4, "two nodes of three named no one and the key is free: a's waiter should try at once")
			drain(t, a)
		})
	}
}
