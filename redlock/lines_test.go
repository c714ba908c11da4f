package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/redlock"
)

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
