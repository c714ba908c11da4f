package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	// In virtual time: a 300 ms lease on the wall clock was lost to a
	// loaded machine's stall now and then (stress.sh, two CPU burners),
	// which is not what this tests.
	inVirtualTime(t, func(t *testing.T) {
		c := newVirtualCluster(t, 3)
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
	})
}

// When extensions fail (a majority of nodes hung), fn's context is cancelled
// before the lease's validity runs out, and Do reports the loss. Done's
// margin (the smaller of NodeTimeout and ttl/10, here 300ms) is what the
// cancellation has to arrive in, so it is sized for a loaded machine.
func TestDoCancelsWorkWhenExtensionsFail(t *testing.T) {
	c := newCluster(t, 5)
	proxies, nodes := c.proxied(t)
	l := newLocker(t, nodes, &redlock.Options{NodeTimeout: 300 * time.Millisecond})
	const ttl = 3 * time.Second
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
	require.NotContains(t, err.Error(), "\n", "one message, one line")
	require.Contains(t, err.Error(), "while the function ran; context canceled")
	assert.True(t, cancelled.Before(until), "cancelled at %v, after Until %v", cancelled, until)
	for _, p := range proxies {
		p.SetBlackhole(false)
		p.DropConnections()
	}
}

// Do stops extending once another extension would carry the lease past
// MaxHold, so fn's context ends at MaxHold at the latest, after at least
// one extension. In virtual time: on the wall clock a loaded machine's
// stall now and then cost the 200 ms lease its only extension.
func TestDoMaxHold(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		c := newVirtualCluster(t, 3)
		const ttl, maxHold = 200 * time.Millisecond, 500 * time.Millisecond
		l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second, MaxHold: maxHold})
		start := time.Now()
		extended := false
		err := l.Do(t.Context(), "k", ttl, func(ctx context.Context, lease *redlock.Lease) error {
			first := lease.Until()
			<-ctx.Done() // run until the lease is given up
			extended = lease.Until().After(first)
			return nil
		})
		held := time.Since(start)
		require.ErrorIs(t, err, redlock.ErrLost)
		assert.True(t, extended, "it was extended at least once")
		assert.LessOrEqual(t, held, maxHold, "held past MaxHold")
		assert.Greater(t, held, ttl, "it was extended at least once")
	})
}

func TestDone(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})

	t.Run("closes before validity runs out", func(t *testing.T) {
		// A margin of 100ms (a tenth of the TTL) for the timer to fire in.
		lease, err := l.TryLock(t.Context(), "a", time.Second)
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

// outage is a go-redis hook that, while on, fails every command the client
// sends (alone or pipelined) and counts them: a node that is briefly
// unreachable, on either transport.
type outage struct {
	on       atomic.Bool
	failures atomic.Int32
}

func (o *outage) DialHook(next redis.DialHook) redis.DialHook { return next }

func (o *outage) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if o.on.Load() {
			o.failures.Add(1)
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}
}

func (o *outage) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if o.on.Load() {
			o.failures.Add(int32(len(cmds)))
			for _, cmd := range cmds {
				cmd.SetErr(errInjected)
			}
			return errInjected
		}
		return next(ctx, cmds)
	}
}

// outage hooks a new outage into the clients of servers idx.
func (c *cluster) outage(idx ...int) *outage {
	o := &outage{}
	for _, i := range idx {
		c.clients[i].AddHook(o)
	}
	return o
}

// waitUntil polls cond until it holds (true) or ctx ends or 10s pass (false).
func waitUntil(ctx context.Context, cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// Three of five nodes stop answering around Do's first extension, which
// fails; nothing refuted the lease, the nodes that hold it still do with
// validity to spare, so the work goes on and a later extension succeeds.
// "at once": the outage begins as fn starts, so the acquisition's SETs still
// in flight on those nodes fail, and once the outage is over those nodes
// answer that the key is missing: they never held it, which refutes nothing.
func TestDoKeepsTheLeaseThroughABriefOutage(t *testing.T) {
	for _, afterEveryGrant := range []bool{true, false} {
		t.Run(map[bool]string{true: "after every node granted", false: "at once"}[afterEveryGrant], func(t *testing.T) {
			c := newCluster(t, 5)
			blip := c.outage(0, 1, 2)
			l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
			err := l.Do(t.Context(), "k", 3*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
				if afterEveryGrant {
					drain(t, l)
				}
				blip.on.Store(true)
				if !waitUntil(ctx, func() bool { return blip.failures.Load() >= 3 }) {
					return fmt.Errorf("no extension failed during the outage: %w", context.Cause(ctx))
				}
				blip.on.Store(false)
				before := lease.Until()
				assert.Positive(t, lease.Validity(), "a failed extension that nothing refuted keeps the validity")
				if !waitUntil(ctx, func() bool { return lease.Until().After(before) }) {
					return fmt.Errorf("no extension succeeded after the outage: %w", context.Cause(ctx))
				}
				return context.Cause(ctx)
			})
			require.NoError(t, err)
		})
	}
}

// A failed Extend loses the lease only when the answers leave fewer than a
// majority of nodes that may still hold it. Nodes 0 and 1 start with another
// holder's value, so exactly nodes 2, 3 and 4 grant; then nodes 0 and 1 are
// freed and stop answering, and node 2 loses the key or not.
func TestExtendFailureLosesOnlyWhatTheNodesRefuted(t *testing.T) {
	for _, holderLostIt := range []bool{false, true} {
		t.Run(map[bool]string{false: "holders failed or answered", true: "a holder lost the key"}[holderLostIt], func(t *testing.T) {
			c := newCluster(t, 5)
			blip, blip2 := c.outage(0, 1), c.outage(3)
			// Without healing: with it, node 2 would hold the lease again.
			l := newLocker(t, c.nodes(nil), &redlock.Options{NoHeal: true})
			c.setOther(t, "k", 0, 1)
			lease, err := l.TryLock(t.Context(), "k", time.Minute)
			require.NoError(t, err)
			drain(t, l)
			require.Equal(t, []int{2, 3, 4}, c.holding("k", lease.Value()))
			c.servers[0].Del("k")
			c.servers[1].Del("k")
			blip.on.Store(true)
			if holderLostIt {
				c.servers[2].Del("k") // a holder answers: missing
			} else {
				blip2.on.Store(true) // a holder fails
			}
			before := lease.Validity()
			err = lease.Extend(t.Context(), time.Minute)
			require.Error(t, err)
			select {
			case <-lease.Done():
				assert.True(t, holderLostIt, "lost although nodes 2, 3 and 4 may all still hold it")
			default:
				assert.False(t, holderLostIt, "two of five may still hold it, yet the lease is kept")
				assert.Positive(t, lease.Validity())
				assert.LessOrEqual(t, lease.Validity(), before, "a failed extension adds no validity")
			}
			blip.on.Store(false)
			blip2.on.Store(false)
			_ = lease.Unlock(t.Context())
		})
	}
}

// Whatever the clock, a lease whose validity ran out or that the nodes no
// longer held when fn returned makes Do report ErrLost; a lease that fn
// unlocked itself does not.
func TestDoReportsALeaseLostWhileFnRan(t *testing.T) {
	tests := []struct {
		name     string
		fn       func(fake *clock.Fake, c *cluster, lease *redlock.Lease) error
		wantLost bool
	}{
		{"validity ran out", func(fake *clock.Fake, _ *cluster, _ *redlock.Lease) error {
			fake.Advance(10 * time.Second)
			return nil
		}, true},
		{"keys expired on the nodes", func(fake *clock.Fake, c *cluster, _ *redlock.Lease) error {
			fake.Advance(15 * time.Second)
			for _, m := range c.servers {
				m.FastForward(15 * time.Second)
			}
			return nil
		}, true},
		{"keys deleted on a majority", func(_ *clock.Fake, c *cluster, _ *redlock.Lease) error {
			for _, m := range c.servers[:2] {
				m.Del("k")
			}
			return nil
		}, true},
		{"unlocked by fn", func(_ *clock.Fake, _ *cluster, lease *redlock.Lease) error {
			return lease.Unlock(context.Background())
		}, false},
		{"held throughout", func(fake *clock.Fake, _ *cluster, _ *redlock.Lease) error {
			fake.Advance(5 * time.Second)
			return nil
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, 3)
			fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			l := newLocker(t, c.nodes(nil), &redlock.Options{Clock: fake, NodeTimeout: 5 * time.Second})
			err := l.Do(t.Context(), "k", 10*time.Second, func(_ context.Context, lease *redlock.Lease) error {
				drain(t, l) // every node has answered the acquisition
				return tt.fn(fake, c, lease)
			})
			if tt.wantLost {
				require.ErrorIs(t, err, redlock.ErrLost)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

// A lease taken for long and then run under Lease.Do with a shorter TTL
// keeps its lease: Done's safety margin is a tenth of the TTL behind the
// current validity (at most NodeTimeout), not of the longest TTL the lease
// ever had. With the longest (30s here), the margin was the whole
// NodeTimeout, and Done closed before each extension came due.
func TestLeaseDoWithAShorterTTLKeepsTheLease(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
	lease, err := l.TryLock(t.Context(), "long-then-short", 30*time.Second)
	require.NoError(t, err)
	err = lease.Do(t.Context(), 1500*time.Millisecond, func(ctx context.Context, _ *redlock.Lease) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(2500 * time.Millisecond): // past the 30s validity's first extensions
			return nil
		}
	})
	require.NoError(t, err)
}

// Locker.Do acquires, runs fn and releases. If ctx ends, or the lease's
// validity runs out, between the acquisition and the start of fn, the lease
// must still be released: nobody else holds it, so nobody else can. (Before
// 3b2f794 fn ran, saw its context ended, and Do released.)
func TestLockerDoReleasesALeaseItCouldNotRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		// after runs in the Observer as the acquisition succeeds,
		// before Lock returns
		after func(cancel context.CancelFunc, fake *clock.Fake)
	}{
		{"ctx ended", func(cancel context.CancelFunc, _ *clock.Fake) { cancel() }},
		{"validity ran out", func(_ context.CancelFunc, fake *clock.Fake) { fake.Advance(time.Minute) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			fake := clock.NewFake(time.Now())
			fake.Resume()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var once atomic.Bool
			obs := redlock.ObserverFunc(func(e redlock.Event) {
				if e.Op == redlock.OpAcquire && e.Err == nil && once.CompareAndSwap(false, true) {
					tc.after(cancel, fake)
				}
			})
			l := newLocker(t, c.nodes(nil), &redlock.Options{Clock: fake, Observer: obs})
			ran := false
			err := l.Do(ctx, "job", 30*time.Second, func(context.Context, *redlock.Lease) error {
				ran = true
				return nil
			})
			drain(t, l)
			for i, m := range c.servers {
				assert.False(t, m.Exists("job"), "node %d keeps the lease Do acquired (fn ran: %v; Do: %v)", i, ran, err)
			}
		})
	}
}

// Lease.Do schedules its first extension a third of its own ttl after it
// starts, whatever validity the lease has left. A lease with less left
// than that (taken with a shorter TTL, or resumed late from a handle) runs
// out before the first extension: Do cancels fn with ErrLost though nodes
// answered every time and an extension would have kept it.
func TestLeaseDoExtendsBeforeTheLeasesOwnValidityRunsOut(t *testing.T) {
	work := func(ctx context.Context, _ *redlock.Lease) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(1200 * time.Millisecond): // past the lease's own validity
			return nil
		}
	}
	t.Run("taken short, run long", func(t *testing.T) {
		c := newCluster(t, 3)
		l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
		lease, err := l.TryLock(t.Context(), "short-then-long", 400*time.Millisecond)
		require.NoError(t, err)
		require.NoError(t, lease.Do(t.Context(), 3*time.Second, work))
	})
	t.Run("resumed late", func(t *testing.T) {
		c := newCluster(t, 3)
		l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
		lease, err := l.TryLock(t.Context(), "resumed-late", 3*time.Second)
		require.NoError(t, err)
		for _, m := range c.servers {
			m.SetTTL("resumed-late", 400*time.Millisecond) // the handle reached the worker late
		}
		worker := otherLocker(t, c, &redlock.Options{NodeTimeout: time.Second})
		resumed, err := worker.Resume(t.Context(), lease.Handle())
		require.NoError(t, err)
		require.NoError(t, resumed.Do(t.Context(), 3*time.Second, work))
	})
}

// Two Lease.Do on one lease: the first to return would release the lease
// while the other's fn still runs under it, and the other would take that
// release for its own fn's Unlock and report nothing. A lease runs under
// one Do at a time: the second is refused.
func TestConcurrentLeaseDoDoesNotHideARelease(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), nil)
	lease, err := l.TryLock(t.Context(), "shared", time.Minute)
	require.NoError(t, err)

	running := make(chan struct{})
	firstDone := make(chan struct{})
	var wg sync.WaitGroup
	var err2 error
	ran2 := false
	wg.Go(func() {
		err2 = lease.Do(t.Context(), time.Minute, func(ctx context.Context, _ *redlock.Lease) error {
			ran2 = true
			close(running)
			<-firstDone // still working when the other Do released the lease
			return nil
		})
	})
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the first Do did not run fn")
	}
	err1 := lease.Do(t.Context(), time.Minute, func(context.Context, *redlock.Lease) error { return nil })
	close(firstDone)
	wg.Wait()
	// The second Do is refused (the lease already runs under Do), so the
	// first's fn keeps its lease to the end, and its Do releases it.
	require.ErrorContains(t, err1, "already runs under Do")
	require.True(t, ran2)
	require.NoError(t, err2)
	require.ErrorIs(t, lease.Check(t.Context()), redlock.ErrNotHeld, "released by the Do that ran")
}

// QuorumError.Keys is the caller's: changing it must not change the
// lease's keys, which later rounds act on.
func TestQuorumErrorKeysAreACopy(t *testing.T) {
	fail := func(c *cluster, msg string) {
		for _, m := range c.servers {
			m.SetError(msg)
		}
	}
	keys := []string{"{q}a", "{q}b"}
	held := func(t *testing.T) (*cluster, *redlock.Lease) {
		c := newCluster(t, 3)
		l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
		lease, err := l.TryLockMulti(t.Context(), keys, time.Minute)
		require.NoError(t, err)
		return c, lease
	}
	t.Run("extend", func(t *testing.T) {
		c, lease := held(t)
		fail(c, "ERR down")
		err := lease.Extend(t.Context(), time.Minute)
		var q *redlock.QuorumError
		require.ErrorAs(t, err, &q)
		require.NotErrorIs(t, err, redlock.ErrNotHeld)
		require.Equal(t, keys, q.Keys)
		q.Keys[1] = "{q}never-locked"
		fail(c, "")
		require.NoError(t, lease.Extend(t.Context(), time.Minute))
		assert.Empty(t, c.holding("{q}never-locked", lease.Value()), "an extension set a key the lease never acquired")
		assert.Len(t, c.holding("{q}b", lease.Value()), 3)
		require.NoError(t, lease.Unlock(t.Context()))
	})
	t.Run("unlock", func(t *testing.T) {
		c, lease := held(t)
		fail(c, "ERR down")
		err := lease.Unlock(t.Context())
		fail(c, "")
		var q *redlock.QuorumError
		require.ErrorAs(t, err, &q)
		q.Keys[0] = "{q}changed"
		assert.Equal(t, keys, lease.Keys())
	})
}

// A failed Extend with a longer TTL leaves the validity, and Done's
// margin, as they were; one with a shorter TTL brings both to it. Done
// still closes before the validity ends.
func TestFailedExtendKeepsDoneBeforeValidity(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
	lease, err := l.TryLock(t.Context(), "span", 2*time.Second)
	require.NoError(t, err)
	until := lease.Until()
	for _, m := range c.servers {
		m.SetError("ERR down")
	}
	require.Error(t, lease.Extend(t.Context(), time.Minute))
	assert.Equal(t, until, lease.Until(), "a failed longer extension gives nothing")
	for _, m := range c.servers {
		m.SetError("")
	}
	select {
	case <-lease.Done():
		assert.Less(t, time.Now().Add(-50*time.Millisecond), until, "Done closed after the validity")
		assert.True(t, time.Now().After(until.Add(-time.Second)), "Done closed early: margin from the failed 1m extension")
	case <-time.After(10 * time.Second):
		t.Fatal("Done never closed")
	}
	_ = lease.Unlock(t.Context()) // ran out: ErrNotHeld or nil, either is fine here
}
