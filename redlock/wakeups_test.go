package redlock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/redlock/internal/notice"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
			beforeListen := func() {
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
			}
			hooks := unsafelocker.Hooks{NoRetryAfterListen: !retry, BeforeListen: &beforeListen}
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

// attempts counts a Locker's acquisition attempts (OpAcquire events).
type attempts struct {
	mu sync.Mutex
	n  int
}

func (a *attempts) Observe(e redlock.Event) {
	if e.Op == redlock.OpAcquire {
		a.mu.Lock()
		a.n++
		a.mu.Unlock()
	}
}

func (a *attempts) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// Three Lockers (processes) wait for one key, joining its line in turn:
// each release names the next Locker in the line, and only its waiter
// tries, so the key goes round in the order they came, at one attempt per
// hand-off (each waiter's two attempts before, its first and the one once
// listening, found the key taken). Control: without lines every release
// wakes every waiting Locker's head, and the later ones try (and lose) at
// each hand-off before theirs.
func TestTurnsGoRoundAcrossLockers(t *testing.T) {
	const waiters = 3
	for _, lines := range []bool{true, false} {
		name := map[bool]string{true: "lines", false: "control-no-lines"}[lines]
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			hooks := unsafelocker.Hooks{NoLines: !lines}
			holder := newLocker(t, c.nodes(nil), withHooks(patient, hooks))
			held, err := holder.TryLock(ctx, "job", time.Minute)
			require.NoError(t, err)
			counts := make([]*attempts, waiters)
			ls := make([]*redlock.Locker, waiters)
			won := make(chan int, waiters)
			release := make([]chan struct{}, waiters)
			var wg sync.WaitGroup
			defer wg.Wait()
			for i := range ls {
				counts[i] = &attempts{}
				ls[i] = newLocker(t, c.nodes(nil), withHooks(&redlock.Options{RetryDelay: time.Minute, RetryJitter: time.Millisecond, Observer: counts[i]}, hooks))
				release[i] = make(chan struct{})
				wg.Add(1)
				go func() {
					defer wg.Done()
					lease, err := ls[i].Lock(ctx, "job", time.Minute)
					if !assert.NoError(t, err) {
						won <- -1
						return
					}
					won <- i
					<-release[i]
					assert.NoError(t, lease.Unlock(ctx))
				}()
				// In the line on every node before the next one comes.
				require.Eventually(t, func() bool { return counts[i].count() == 2 }, 10*time.Second, time.Millisecond)
				if lines {
					require.Eventually(t, func() bool { return inLine(c, "job", ls[i]) == 3 }, 10*time.Second, time.Millisecond, "waiter %d joined the line", i)
				} else {
					time.Sleep(50 * time.Millisecond)
				}
			}
			require.NoError(t, held.Unlock(ctx))
			var order []int
			for range ls {
				i := <-won
				require.GreaterOrEqual(t, i, 0)
				order = append(order, i)
				if !lines && len(order) == 1 {
					// The control: every other waiter is woken by the first
					// release and tries (and loses); wait for it, however
					// loaded the machine, rather than guess how long it takes.
					require.Eventually(t, func() bool {
						for j, a := range counts {
							if j != i && a.count() < 3 {
								return false
							}
						}
						return true
					}, 10*time.Second, time.Millisecond, "the control: the first release woke every waiting Locker")
				}
				time.Sleep(50 * time.Millisecond) // any other Locker's attempt at this release is made by now
				close(release[i])
			}
			tried := make([]int, waiters)
			for i, a := range counts {
				tried[i] = a.count()
			}
			if lines {
				assert.Equal(t, []int{0, 1, 2}, order, "turns in the order the Lockers joined the line")
				assert.Equal(t, []int{3, 3, 3}, tried, "one attempt each at the hand-offs: the one that won")
			} else {
				assert.Greater(t, tried[1]+tried[2], 3+3, "the control: waiters tried at hand-offs that were not theirs")
			}
			wg.Wait()
			for _, l := range append(ls, holder) {
				drain(t, l)
			}
		})
	}
}

// inLine is how many of c's nodes have l in key's line.
func inLine(c *cluster, key string, l *redlock.Locker) int {
	n := 0
	for _, m := range c.servers {
		list, _ := m.List("{" + key + "}:redlock-waiters")
		for _, id := range list {
			if id == redlock.ID(l) {
				n++
			}
		}
	}
	return n
}

// A release that names a Locker that is gone (a crashed process's place,
// left in the line) costs the others one poll, not the lock: they hear
// that another's turn came, wait, and win at their poll; the gone place is
// popped. Control: with an empty line the same waiter wins long before its
// poll.
func TestATurnNamedForAGoneLockerCostsOnePoll(t *testing.T) {
	for _, gone := range []bool{true, false} {
		name := map[bool]string{true: "gone-locker-named", false: "control-empty-line"}[gone]
		t.Run(name, func(t *testing.T) {
			const poll = 2 * time.Second
			c := newCluster(t, 3)
			a := newLocker(t, c.nodes(nil), patient)
			b := newLocker(t, c.nodes(nil), &redlock.Options{RetryDelay: poll, RetryJitter: time.Millisecond})
			ctx := t.Context()
			held, err := a.TryLock(ctx, "job", time.Minute)
			require.NoError(t, err)
			got := lockSoon(t, b, "job", time.Minute)
			require.Eventually(t, func() bool { return inLine(c, "job", b) == 3 }, 10*time.Second, time.Millisecond, "b joined the line on every node")
			if gone {
				for _, m := range c.servers {
					_, err := m.Lpush("{job}:redlock-waiters", "gone")
					require.NoError(t, err)
				}
			}
			// b's poll timer started at its last attempt, before it
			// joined; a release now leaves most of the poll to run.
			start := time.Now()
			require.NoError(t, held.Unlock(ctx))
			require.NoError(t, <-got)
			waited := time.Since(start)
			if gone {
				assert.Greater(t, waited, poll/4, "the turn was gone's: b waited for its poll")
				for _, m := range c.servers {
					l, _ := m.List("{job}:redlock-waiters")
					assert.NotContains(t, l, "gone", "the gone place was popped")
				}
			} else {
				assert.Less(t, waited, poll/4, "b's turn: it tried at once")
			}
			drain(t, a)
			drain(t, b)
		})
	}
}

// A Lock that gives up (its context ends) takes its Locker out of the
// line when no other call of the Locker waits for the key: a release does
// not name a Locker with no one to take the turn.
func TestAWaiterThatGivesUpLeavesTheLine(t *testing.T) {
	c := newCluster(t, 3)
	a := newLocker(t, c.nodes(nil), patient)
	b := newLocker(t, c.nodes(nil), patient)
	held, err := a.TryLock(t.Context(), "job", time.Minute)
	require.NoError(t, err)
	inLine := func() int { return inLine(c, "job", b) }
	got := lockSoon(t, b, "job", 2*time.Second)
	require.Eventually(t, func() bool { return inLine() == 3 }, 10*time.Second, time.Millisecond, "b joined the line on every node")
	require.ErrorIs(t, <-got, context.DeadlineExceeded)
	require.Eventually(t, func() bool { return inLine() == 0 }, 10*time.Second, time.Millisecond, "b left the line")
	require.NoError(t, held.Unlock(t.Context()))
	drain(t, a)
	drain(t, b)
}

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
