package redlock

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/redlock/internal/notice"
	"github.com/redlock/redlock/redlock/internal/waitq"
)

// Lock acquires key for ttl, trying again until it wins or ctx ends. Errors
// that no retry can cure (bad arguments) are returned at once. When ctx
// ends, the error matches ctx.Err() and carries the last attempt that the
// nodes decided (errors.Is(err, ErrNotObtained) under contention).
//
// How it waits: this Locker's Lock calls for a key queue in arrival order,
// and only the head tries; a release by this Locker wakes it at once, a
// release elsewhere when its notices come (unless Options.NoWakeUps), and
// otherwise it polls after a random delay in [RetryDelay,
// RetryDelay+RetryJitter), longer while its attempts split the nodes with
// other contenders. Across processes, the key's line on the nodes names
// whose turn a release is, and a Lock just after this Locker's release
// named another waits a few round trips for it to try. An attempt that
// finds another holder's value stops waiting for the slowest nodes soon
// (see docs/performance.md, "Waiting for a busy lock"), unlike TryLock's, which waits
// for every node.
//
// Lock waits as long as ctx allows: a context without a deadline or
// cancellation is consent to wait until the lock is free, however long that
// is. Give it a deadline to bound the wait.
func (l *Locker) Lock(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := l.made("Lock"); err != nil {
		return nil, err
	}
	req, err := l.request(ctx, "acquire", key, ttl)
	if err != nil {
		return nil, err
	}
	req.yield = true // Lock tries again: its attempts stop waiting soon under contention (yielding)
	wt, ready, passed := l.enqueue(ctx, key)
	won := false
	defer func() { wt.leave(won) }()
	var tries retries
	for {
		if !ready {
			poll := drift.Add(l.retryWait(), l.splitBackoff(tries.split))
			if passed {
				// The first wait after a turn passed to another Locker:
				// as long as that one takes to try (see handOffWait).
				poll, passed = l.handOffWait(poll), false
			}
			if !wt.await(ctx, poll) {
				break // ctx ended
			}
		}
		wt.hear(ctx)
		var lease *Lease
		lease, err = l.attempt(ctx, req, tries.attempts+1)
		if err == nil {
			won = true
			return lease, nil
		}
		if tries.lost(ctx, &req, err) {
			if errors.Is(err, ErrNotDurable) {
				return nil, err
			}
			break
		}
		ready = wt.taken(ctx, tries.split)
	}
	if tries.decided == nil && err == nil {
		return nil, fmt.Errorf("redlock: lock %q: %w", key, contextError(ctx)) // ctx ended before the first attempt
	}
	return nil, tries.gaveUp(ctx, strconv.Quote(key), err)
}

// waiter is one Lock call's place in the wait for its key: in this
// Locker's queue of Lock calls (package waitq), where only the head tries;
// listening for releases in other processes (package notice); and in the
// key's line on the nodes (joinLine), which names whose turn a release is.
type waiter struct {
	l      *Locker
	key    string
	w      *waitq.Waiter
	listen *notice.Listener // nil: not listening yet (or Options.NoWakeUps)
	heard  bool             // listen was confirmed (or waited for) before an attempt
	joined time.Time        // when this call last joined the key's line (zero: not in it)
	// inLine: this call joined the key's line. A release that named this
	// Locker took its place on the nodes that named it, not always on
	// every node (lines differ where joins raced): a call that gives up
	// leaves the line on every node whatever turns it was named.
	inLine bool
}

// enqueue puts a Lock call for key in this Locker's queue before its
// first attempt, so that a release after an attempt that found the key
// taken wakes it (see package waitq). A call behind other waiters listens
// for releases elsewhere at once (one at the head, only once an attempt
// found the key taken). It reports whether the call may try at once (the
// head, with no lease of this Locker on the key and no turn just passed to
// another Locker), and passed: the turn went to another Locker, and the
// call waits in the key's line for this one's.
func (l *Locker) enqueue(ctx context.Context, key string) (wt *waiter, ready, passed bool) {
	w, first, held, passed := l.turns.Join(key)
	wt = &waiter{l: l, key: key, w: w}
	if !first {
		wt.listen = l.notices.Listen(key)
	}
	if passed {
		wt.join(ctx)
	}
	return wt, first && !held && !passed, passed
}

// hear waits, once, until the call's subscription to the key's releases
// is confirmed, so that what follows (an attempt, a join) goes after it
// and a release after that is heard (see package notice).
func (wt *waiter) hear(ctx context.Context) {
	if wt.listen != nil && !wt.heard {
		wt.heard = true
		wt.listen.Ready(ctx, wt.l.needHeard(), wt.l.opts.NodeTimeout)
	}
}

// join puts this Locker at the back of the key's line on every node, once
// listening (a turn named by a release no one hears would be lost).
func (wt *waiter) join(ctx context.Context) {
	if wt.listen == nil {
		wt.listen = wt.l.notices.Listen(wt.key)
	}
	if wt.listen != nil {
		wt.hear(ctx)
		wt.l.joinLine(wt.key)
		wt.joined, wt.inLine = wt.l.opts.Clock.Now(), true
	}
}

// taken is what an attempt that found the key taken changes in the wait,
// split being the attempts in a row that split the nodes. After the first
// such attempt the call listens, and tries again as soon as it listens
// (reported as ready), so that no release after that attempt is missed;
// after the next ones it joins the key's line, where it is not in it or
// has not joined it again for a third of lineTTL.
func (wt *waiter) taken(ctx context.Context, split int) (ready bool) {
	l := wt.l
	switch {
	case wt.listen == nil:
		if f := l.opts.unsafe.BeforeListen; f != nil {
			(*f)() // a test's point to act (internal/unsafelocker)
		}
		wt.listen = l.notices.Listen(wt.key)
		return wt.listen != nil && split == 0 && !l.opts.unsafe.NoRetryAfterListen
	case wt.joined.IsZero() || l.opts.Clock.Now().Sub(wt.joined) > lineTTL/3:
		wt.join(ctx)
	}
	return false
}

// await waits for the call's next turn to try (awaitTurn), poll at most
// once it is the head. It reports false when ctx ended first.
func (wt *waiter) await(ctx context.Context, poll time.Duration) bool {
	turn := wt.awaitTurn(ctx, poll)
	if turn == turnNamed {
		wt.joined = time.Time{} // the release took this Locker's place in the line
	}
	return turn != turnEnded
}

// leave takes the call out of the queue (won: with the lease, whose
// release wakes the next) and stops its listening; a call that gives up
// while no other call here waits leaves the key's line too, since no
// waiter here is left to take a turn named for this Locker.
func (wt *waiter) leave(won bool) {
	l := wt.l
	l.turns.Leave(wt.key, wt.w, won)
	wt.listen.Stop()
	if !won && wt.inLine && l.turns.Waiting(wt.key) == 0 {
		l.leaveLine(wt.key)
	}
}

// retries is what a Lock's attempts that did not win tell the next: how
// many there were, the last one the nodes (not ctx) decided, and how many
// in a row split the nodes (some granted, no majority).
type retries struct {
	attempts, split int
	decided         error
}

// lost records an attempt of req that failed with err, and reports
// whether to stop trying: an error no retry cures (ErrNotDurable: the
// nodes' settings), or ctx's end. It counts the attempts that stopped
// waiting for slow nodes in a row into req.yielded (see yielding).
func (r *retries) lost(ctx context.Context, req *request, err error) (stop bool) {
	r.attempts++
	if errors.Is(err, ErrNotDurable) {
		return true
	}
	if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		r.decided = err
	}
	if ctx.Err() != nil {
		return true
	}
	if errors.Is(err, errNotWaitedFor) {
		req.yielded++ // the next attempt waits four times as long (see yielding)
	} else {
		req.yielded = 0
	}
	if q, ok := err.(*QuorumError); ok && q.Granted > 0 {
		r.split++
	} else {
		r.split = 0
	}
	return false
}

// gaveUp is the error of a Lock of name whose ctx ended: with the last
// attempt the nodes decided, or else last, ctx's own end as the last
// attempt saw it.
func (r *retries) gaveUp(ctx context.Context, name string, last error) error {
	if r.decided == nil {
		return last // ctx ended during the first attempt
	}
	return fmt.Errorf("redlock: lock %s: gave up after %d attempts: %w; last decided attempt: %w", name, r.attempts, contextError(ctx), r.decided)
}

// turn is what awaitTurn saw: a turn to try (named for this Locker by a
// release elsewhere, or not), or ctx's end.
type turn uint8

const (
	turnEnded turn = iota
	turnTry
	turnNamed
)

// awaitTurn waits until the call, in the key's queue, may send its next
// attempt: once it is the head, at a release of the key by this Locker, at a release
// elsewhere that named this Locker's turn or no one's, or after poll (for
// releases no notice told of, and leases that expire unreleased). A waiter
// behind the head sends nothing and only waits to move up. A release here
// that named another Locker's turn joins the key's line, and the wait goes
// on. It reports turnEnded when ctx ends first.
func (wt *waiter) awaitTurn(ctx context.Context, poll time.Duration) turn {
	l, key, w := wt.l, wt.key, wt.w
	var timer *time.Timer // the poll, counted from when w is the head
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if first, _ := l.turns.Head(key, w); !first {
			select {
			case <-w.Wake: // moved up, perhaps to the head
				// One wake-up may stand for two (the head left, and the
				// key was released) and a release may have gone to a head
				// that left without taking it: a new head that finds the
				// key not held here tries at once.
				if first, held := l.turns.Head(key, w); first && !held {
					w.Woken()
					return turnTry
				}
				continue
			case <-ctx.Done():
				return turnEnded
			}
		}
		if timer == nil {
			timer = time.NewTimer(poll)
		}
		select {
		case <-w.Wake:
			why := w.Woken()
			if why&waitq.Passed != 0 {
				wt.join(ctx) // the turn passed to another Locker: wait in the key's line for this one's
			}
			_, held := l.turns.Head(key, w)
			switch {
			case why&waitq.NamedThis != 0:
				return turnNamed
			case why&waitq.NamedSome != 0:
				// Named by some nodes only: others named elsewhere try
				// too; stagger, as below. The place in those nodes' lines
				// is gone: turnNamed, so that a loss joins again.
				if !l.stagger(ctx) {
					return turnEnded
				}
				return turnNamed
			case held:
				// moved up behind a lease of this Locker: wait for its release
			case why&waitq.ReleasedHere != 0 || why == 0:
				return turnTry // released here, or the head before left without a lease
			case why&waitq.NamedNobody != 0:
				// A release elsewhere that named no Locker: every other
				// Locker's head heard it too. Attempts sent at one moment
				// split the nodes between them and none wins; a random
				// stagger of up to two round trips lets the first take
				// every node.
				if !l.stagger(ctx) {
					return turnEnded
				}
				return turnTry
			}
			// passed: the turn is another Locker's; wait for this one's
		case <-timer.C:
			return turnTry
		case <-ctx.Done():
			return turnEnded
		}
	}
}

// splitBackoff is the extra wait after split attempts lost in a row, each
// of which some nodes granted but no majority: contenders that each won a
// minority (a slow node holding every attempt back, say) fall out of step
// instead of taking turns at keeping each other out. It grows with split,
// as a random delay up to RetryJitter (or RetryDelay) times 2^split,
// capped at 2^5.
func (l *Locker) splitBackoff(split int) time.Duration {
	if split == 0 || l.opts.unsafe.NoSplitBackoff { // the latter: a test's control
		return 0
	}
	unit := max(l.opts.RetryJitter, l.opts.RetryDelay)
	if unit <= 0 {
		return 0
	}
	return mathrand.N(drift.Mul(unit, 1<<min(split, 5)))
}

// retryWait is a random delay in [RetryDelay, RetryDelay+RetryJitter): how
// long Lock waits between attempts, and Do after a failed extension.
func (l *Locker) retryWait() time.Duration {
	wait := l.opts.RetryDelay
	if l.opts.RetryJitter > 0 {
		wait = drift.Add(wait, mathrand.N(l.opts.RetryJitter))
	}
	return wait
}
