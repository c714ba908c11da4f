package redlock

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"time"
)

// ErrLost means a lease was lost while the work it protected was running:
// an extension failed, or its validity ran out. Work done under it may have
// overlapped another holder's.
var ErrLost = errors.New("redlock: lease lost")

// Do acquires key (as Lock), runs fn while holding it, and releases it when
// fn returns, or panics (the panic is re-raised after the release).
//
// fn's context is cancelled, with cause ErrLost, when the lease is lost or
// about to expire (see Lease.Done), or when ctx ends. Meanwhile Do extends the
// lease by ttl about every third of ttl (with jitter) while validity is left,
// for at most Options.MaxHold in all if that is set. If the lease was lost
// while fn ran, Do returns an error that matches ErrLost, joined with fn's.
func (l *Locker) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error) (err error) {
	if fn == nil {
		return fmt.Errorf("redlock: do %q: nil function", key)
	}
	lease, err := l.Lock(ctx, key, ttl)
	if err != nil {
		return err
	}
	work, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { l.keepExtending(work, lease, ttl, stop) })
	wg.Go(func() {
		select {
		case <-lease.Done():
			cancel(fmt.Errorf("redlock: do %q: %w", key, ErrLost))
		case <-stop:
		}
	})
	defer func() {
		panicked := recover()
		close(stop)
		wg.Wait()
		lost := lease.isLost()
		cancel(nil)
		unlockErr := lease.Unlock(context.WithoutCancel(ctx))
		if panicked != nil {
			panic(panicked)
		}
		switch {
		case lost:
			err = errors.Join(fmt.Errorf("redlock: do %q: %w while the function ran", key, ErrLost), err)
		case unlockErr != nil && err == nil:
			err = unlockErr
		}
	}()
	return fn(work, lease)
}

// keepExtending extends lease by ttl about every ttl/3 until stop closes, the
// lease is lost, or MaxHold has passed since the start.
func (l *Locker) keepExtending(ctx context.Context, lease *Lease, ttl time.Duration, stop <-chan struct{}) {
	started := l.opts.Clock.Now()
	for {
		every := ttl / 3
		wait := every - every/4 + mathrand.N(every/2+1) // ttl/3 ± ttl/12
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
		if l.opts.MaxHold > 0 && l.opts.Clock.Now().Sub(started)+ttl > l.opts.MaxHold {
			return // let it run out at MaxHold at the latest
		}
		if lease.Extend(context.WithoutCancel(ctx), ttl) != nil {
			return // Extend marked it lost; Done has closed
		}
	}
}
