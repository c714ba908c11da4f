package redlock

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock/redlock/drift"
)

// Do acquires key (as Lock), runs fn while holding it, and releases it when
// fn returns, or panics (the panic is re-raised after the release).
//
// fn's context is cancelled, with cause ErrLost, when the lease is lost or
// about to expire (see Lease.Done), or when ctx ends. Meanwhile Do extends the
// lease by ttl about every third of ttl (with jitter) while validity is left,
// for at most Options.MaxHold in all if that is set. An extension that fails
// without any node refuting the lease (nodes down or slow) costs nothing but
// time: the lease keeps its validity and Do tries again after
// [RetryDelay, RetryDelay+RetryJitter), at most a sixth of ttl, until an
// extension succeeds, nodes refute it, or the validity is about to run out.
//
// If fn unlocks the lease itself, Do leaves it at that. Otherwise Do returns
// an error matching ErrLost, joined with fn's, when the lease was
// lost while fn ran: Done closed, its validity had run out by the time fn
// returned (on Options.Clock), or the release found that a majority of nodes
// no longer held it.
func (l *Locker) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error) (err error) {
	if fn == nil {
		return fmt.Errorf("redlock: do %q: nil function", key)
	}
	lease, err := l.Lock(ctx, key, ttl)
	if err != nil {
		return err
	}
	return lease.Do(ctx, ttl, fn)
}

// Do runs fn while holding the lease, extending it by ttl in the
// background, and releases it when fn returns, as Locker.Do does once it
// has acquired: for a lease taken otherwise (LockMulti, TryLock, or
// Locker.Resume in another process). fn runs even when ctx has already
// ended (its context is then cancelled), so that the lease is released in
// every case but these, which leave the lease as it was and return an
// error: a nil fn or ctx, a ttl Extend would refuse. A lease already
// unlocked or run out is refused with ErrNotHeld, and fn does not run (one
// that ran out is released all the same); so is a lease already running
// under another Do (errDoing), which would release it under the other's
// function. The first extension comes no later than a third of the
// validity the lease has left, however long ttl is (a lease resumed late
// may have less than ttl). Options.MaxHold counts from the start of this
// Do, not from the acquisition.
func (lease *Lease) Do(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error) (err error) {
	if err := lease.made("Do"); err != nil {
		return err
	}
	switch {
	case fn == nil:
		return fmt.Errorf("redlock: do %s: nil function", lease.name())
	case ctx == nil:
		return fmt.Errorf("redlock: do %s: nil context", lease.name())
	}
	l := lease.locker
	if err := l.checkTTL("do", lease.keys[0], lease.multi(), ttl); err != nil {
		return err
	}
	if !lease.doing.CompareAndSwap(false, true) {
		return fmt.Errorf("redlock: do %s: %w", lease.name(), errDoing)
	}
	defer lease.doing.Store(false)
	if err := lease.usable("do"); err != nil {
		if unlocked, _ := lease.endedAt(l.opts.Clock.Now()); !unlocked {
			_ = lease.Unlock(context.WithoutCancel(ctx)) // ran out: what the nodes still hold goes
		}
		return err
	}
	work, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lostReported atomic.Bool
	reportLost := func(err error) {
		if l.observed() && lostReported.CompareAndSwap(false, true) {
			l.emit(Event{Op: OpLost, Key: lease.keys[0], Duration: l.opts.Clock.Now().Sub(lease.acquiredAt), Token: lease.Token(), Err: err})
		}
	}
	wg.Go(func() { l.keepExtending(work, lease, ttl, stop) })
	wg.Go(func() {
		select {
		case <-lease.Done():
			lostErr := fmt.Errorf("redlock: do %s: %w", lease.name(), ErrLost)
			if lease.isLost() {
				reportLost(lostErr)
			}
			cancel(lostErr)
		case <-stop:
		}
	})
	defer func() {
		panicked := recover()
		// Judged as fn returns: an extension that lands after it cannot
		// close a gap that was already there.
		unlockedByFn, ranOut := lease.endedAt(l.opts.Clock.Now())
		close(stop)
		wg.Wait()
		lost := !unlockedByFn && (ranOut || lease.isLost())
		cancel(nil)
		unlockErr := lease.Unlock(context.WithoutCancel(ctx))
		if panicked != nil {
			panic(panicked)
		}
		switch {
		case lost:
			lostErr := fmt.Errorf("redlock: do %s: %w while the function ran", lease.name(), ErrLost)
			reportLost(lostErr)
			err = joinErrors(lostErr, err)
		case !unlockedByFn && errors.Is(unlockErr, ErrNotHeld):
			lostErr := fmt.Errorf("redlock: do %s: %w: the nodes no longer held it when the function returned: %w", lease.name(), ErrLost, unlockErr)
			reportLost(lostErr)
			err = joinErrors(lostErr, err)
		case !unlockedByFn && unlockErr != nil && err == nil:
			err = unlockErr // fn's own Unlock already reported its outcome to fn
		}
	}()
	return fn(work, lease)
}

// keepExtending extends lease by ttl about every ttl/3 until stop closes, the
// lease is lost, or MaxHold has passed since the start. After an extension
// that failed without losing the lease, it tries again soon.
func (l *Locker) keepExtending(ctx context.Context, lease *Lease, ttl time.Duration, stop <-chan struct{}) {
	started := l.opts.Clock.Now()
	nextExtension := func() time.Duration { return ttl/3 - ttl/12 + mathrand.N(ttl/6+1) } // ttl/3 ± ttl/12
	// The first within a third of what the lease has left: it may have
	// less than ttl (taken shorter, or resumed late). After an extension
	// it has ttl's.
	wait := max(min(nextExtension(), lease.Validity()/3), 0)
	for {
		timer := time.NewTimer(wait)
		select {
		case <-stop:
			timer.Stop()
			return
		case <-lease.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if l.opts.MaxHold > 0 && drift.Add(l.opts.Clock.Now().Sub(started), ttl) > l.opts.MaxHold {
			return // let it run out at MaxHold at the latest
		}
		err := lease.Extend(context.WithoutCancel(ctx), ttl)
		switch {
		case err == nil:
			wait = nextExtension()
		case errors.Is(err, ErrNotHeld):
			return // refuted, or its validity ran out: Done closes
		default:
			// Nodes failed; nothing was refuted and the lease keeps its
			// validity. Try again soon; Done's margin bounds the retries.
			wait = min(l.retryWait(), ttl/6)
		}
	}
}
