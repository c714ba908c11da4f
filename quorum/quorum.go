// Package quorum runs one call on each of N nodes in parallel and decides, as
// early as the replies allow, whether a majority accepted.
//
// The decision returns as soon as the outcome is known: a majority accepted,
// or so many refused or failed that a majority is impossible. A slow or hung
// node therefore costs nothing while the others can decide, and a node that
// has not replied by the deadline counts as failed. The calls themselves are
// never abandoned: every call's completion can still be observed after the
// decision (Settled, Result, Wait), which is how a caller cleans up after a
// reply that arrived too late to count.
//
// This is why errgroup is not the tool for the vote: its first error cancels
// the rest, while here one failed node is routine and the others must still
// be heard.
//
// The API is deliberately tiny: Majority, Start, and the Round it returns.
// The package knows nothing of Redis or locks.
package quorum

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Majority returns the smallest count of n nodes that is more than half.
func Majority(n int) int { return n/2 + 1 }

// ErrNoReply is the error of a node that had not replied when the decision's
// deadline passed.
var ErrNoReply = errors.New("quorum: no reply before the deadline")

// ErrAllLate is the error of the nodes of a decision (DecideWithin) none
// of which had replied when its wait and its grace had both passed: every
// node late together. It matches ErrNoReply.
var ErrAllLate = fmt.Errorf("%w; every node late together", ErrNoReply)

// Round is one call on each of N nodes, started by Start or Begin.
type Round[T any] struct {
	mu       sync.Mutex
	calls    []call[T]
	arrivals chan int // indexes of returned calls, buffered to N
	pending  int      // calls not returned yet
	afterAll func()   // run by the last Deliver (AfterAll)
	// lateTimer, a test switch, runs when a decision's timer has fired,
	// before the decision reads the time: a test sleeps there to make
	// the timer fire late, as a starved or paused caller's does.
	lateTimer func()
}

// call is one node's call in a round.
type call[T any] struct {
	value    T
	err      error
	returned bool
	settled  chan struct{} // made on demand (Settled), closed once the call has returned
}

// closed is the channel Settled returns for a call that has already returned.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Start runs call(i) for every i in [0, n) in its own goroutine and returns at
// once. call must return: give it a context or timeout of its own. A call
// that panics crashes the program, as in errgroup.
func Start[T any](n int, call func(i int) (T, error)) *Round[T] {
	r := Begin[T](n)
	for i := range n {
		go func() {
			v, err := call(i)
			r.Deliver(i, v, err)
		}()
	}
	return r
}

// Begin returns a round of n calls that the caller runs itself, in whatever
// way suits it (an asynchronous transport, say, that needs no goroutine per
// call), reporting each call's result with Deliver.
func Begin[T any](n int) *Round[T] {
	return &Round[T]{
		calls: make([]call[T], n),
		// Buffered to n so that no call blocks after the decision stopped reading.
		arrivals: make(chan int, n),
		pending:  n,
	}
}

// Deliver reports the result of call i. It must be called exactly once for
// each i of a round from Begin (a second call panics); it never blocks.
func (r *Round[T]) Deliver(i int, v T, err error) {
	r.mu.Lock()
	c := &r.calls[i]
	if c.returned {
		r.mu.Unlock()
		panic(fmt.Sprintf("quorum: call %d delivered twice", i))
	}
	c.value, c.err, c.returned = v, err, true
	settled := c.settled
	r.pending--
	var after func()
	if r.pending == 0 {
		after, r.afterAll = r.afterAll, nil
	}
	r.mu.Unlock()
	if settled != nil {
		close(settled)
	}
	r.arrivals <- i
	if after != nil {
		after()
	}
}

// AfterAll keeps f to run inside the last Deliver, on its goroutine, after
// the result is recorded, and reports true; or, when every call has
// returned already, keeps nothing and reports false, for the caller to go on
// at once itself. Why: waiting for the calls a decision did not wait for
// costs a goroutine and a channel per call, and what follows them is nearly
// always nothing (a check of their results); f decides, in the last
// Deliver, whether more is to be done. f must not block, since Deliver
// never does. A round keeps one f at most: a second call panics.
func (r *Round[T]) AfterAll(f func()) (later bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == 0 {
		return false
	}
	if r.afterAll != nil {
		panic("quorum: AfterAll called twice on a round")
	}
	r.afterAll = f
	return true
}

// Returned reports whether every call has returned. A caller that would
// otherwise make a func for AfterAll asks it first: most rounds have
// returned by then, and a func that AfterAll may keep is allocated whether
// or not it is kept.
func (r *Round[T]) Returned() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending == 0
}

// Len returns the number of nodes.
func (r *Round[T]) Len() int { return len(r.calls) }

// Settled returns a channel that is closed once node i's call has returned,
// whether before or after the decision.
func (r *Round[T]) Settled(i int) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &r.calls[i]
	switch {
	case c.returned:
		return closed
	case c.settled == nil:
		c.settled = make(chan struct{})
	}
	return c.settled
}

// Result waits for node i's call to return and returns its result.
func (r *Round[T]) Result(i int) (T, error) {
	<-r.Settled(i)
	return r.returned(i)
}

// returned is the result of call i, which has returned.
func (r *Round[T]) returned(i int) (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[i].value, r.calls[i].err
}

// Wait waits for every call to return.
func (r *Round[T]) Wait() {
	for i := range r.calls {
		<-r.Settled(i)
	}
}

// Vote is one node's part in a decision.
type Vote[T any] struct {
	Value T
	// Err is the call's error; ErrNoReply or the context's error (context.Cause)
	// if the node had not replied when the deadline passed or the context
	// ended. A vote with neither Replied nor Err was not waited for: the
	// other replies decided first.
	Err error
	// Replied reports whether the call returned before the decision.
	Replied bool
	// Accepted reports whether the reply counted towards the majority.
	Accepted bool
}

// Tally is the outcome of a decision.
type Tally[T any] struct {
	Votes    []Vote[T] // one per node, in node order
	Accepted int       // replies that counted towards the majority
	Refused  int       // replies that did not
	Need     int       // Majority(N)
	Won      bool      // Accepted >= Need
	// Late reports that the decision waited on past the wait, within its
	// grace (DecideWithin): no node had replied by then, or the latest
	// reply came late in it, or the caller was late to see it pass.
	Late bool
}

// Decide counts replies as they arrive, accept telling which count towards
// the majority, and returns as soon as the outcome is known. Nodes that have
// not replied when wait has passed (wait > 0) or ctx is done count as refused.
// Decide reads the round's arrivals and must be called at most once.
func (r *Round[T]) Decide(ctx context.Context, wait time.Duration, accept func(T, error) bool) Tally[T] {
	return r.count(ctx, wait, 0, accept, false)
}

// DecideWithin is Decide with patience for the caller's own stall. When
// wait passes before any node has replied, every node is late together,
// which says more of the caller (a pause of its process, of its network)
// than of the nodes: a dead minority cannot make the others late. So the
// decision waits on, up to grace more, for the first reply. Nodes are
// judged against their peers: once wait has passed, those still
// unanswered get wait from the latest reply (within the grace), and count
// as refused (ErrNoReply) after it; so they do at wait itself where every
// reply came in the first half of wait (the caller and those nodes ran
// well: the silent ones are the nodes' fault), unless the caller itself
// was late to see wait pass: a timer that fires late (by more than an
// eighth of wait) says the caller was not running, nor reading its
// replies, and the nodes still out get as long again as it was late.
// Nodes still silent, none having replied, when the grace has passed
// count as refused with ErrAllLate. Tally.Late reports that the decision
// waited past wait.
// DecideWithin reads the round's arrivals and must be called at most
// once, and not together with Decide or Collect.
func (r *Round[T]) DecideWithin(ctx context.Context, wait, grace time.Duration, accept func(T, error) bool) Tally[T] {
	return r.count(ctx, wait, grace, accept, false)
}

// Collect is Decide without the early decision: it waits for every node's
// reply (until wait has passed or ctx is done), for a caller that wants to
// hear from each node rather than learn an outcome, such as an operator's
// inspection of what every node holds. Collect reads the round's arrivals
// and must be called at most once, and not together with Decide.
func (r *Round[T]) Collect(ctx context.Context, wait time.Duration, accept func(T, error) bool) Tally[T] {
	return r.count(ctx, wait, 0, accept, true)
}

// count reads arrivals into a tally until the outcome is known or, with
// all, until every node has answered or been closed. (A flag, not a
// function: a closure in a generic method carries its type's dictionary,
// and would be allocated on every decision.)
func (r *Round[T]) count(ctx context.Context, wait, grace time.Duration, accept func(T, error) bool, all bool) Tally[T] {
	n := r.Len()
	t := Tally[T]{Votes: make([]Vote[T], n), Need: Majority(n)}
	var deadline <-chan time.Time
	var timer *time.Timer
	var p patience
	if grace > 0 {
		p.wait, p.start = wait, time.Now()
		p.due, p.graceEnds = p.start.Add(wait), p.start.Add(wait+grace)
	}
	if wait > 0 {
		timer = time.NewTimer(wait)
		defer timer.Stop()
		deadline = timer.C
	}
	for {
		if all {
			if t.Accepted+t.Refused >= n {
				break
			}
		} else if t.Accepted >= t.Need || t.Refused > n-t.Need {
			break
		}
		select {
		case i := <-r.arrivals:
			value, err := r.returned(i)
			v := Vote[T]{Value: value, Err: err, Replied: true}
			v.Accepted = accept(v.Value, v.Err)
			t.Votes[i] = v
			if v.Accepted {
				t.Accepted++
			} else {
				t.Refused++
			}
			if grace > 0 {
				p.last = time.Now()
				if t.Late { // past wait: the others get wait from this reply, their peer's
					d := min(wait, p.graceEnds.Sub(p.last))
					p.due = p.last.Add(d)
					timer.Reset(d)
				}
			}
		case <-deadline:
			if r.lateTimer != nil {
				r.lateTimer()
			}
			if grace > 0 {
				now := time.Now()
				if until := p.until(now, t.Late); until.After(now) {
					t.Late = true
					p.due = until
					timer.Reset(until.Sub(now))
					continue
				}
			}
			if t.Late && p.last.IsZero() {
				t.closeUnanswered(ErrAllLate)
				continue
			}
			t.closeUnanswered(ErrNoReply)
		case <-ctx.Done():
			t.closeUnanswered(context.Cause(ctx))
		}
	}
	t.Won = t.Accepted >= t.Need
	return t
}

// patience is the timing of a decision with a grace (DecideWithin), on
// the monotonic clock.
type patience struct {
	wait      time.Duration
	start     time.Time // when the decision began
	due       time.Time // when its timer is set to fire
	graceEnds time.Time // start + wait + grace
	last      time.Time // the latest reply; zero before the first
}

// until is how long a decision waits on when its timer, due at p.due,
// fired at now; a time not after now where it waits no longer. waited
// says it has waited past wait already (Tally.Late).
//
// Two signs say the caller, not its nodes, is late. The nodes are late
// together (lateTogether), once: the others get wait from the latest
// reply, or the grace for a first one. Or the timer fired late, by more
// than an eighth of wait: the caller was not running (its host starved
// it, or a GC paused it), and neither were the goroutines that read its
// replies, which may wait unread since before the deadline; so the
// unanswered nodes get as long again as the caller was late. That is
// the shape the first sign misses: early replies, then the caller
// stalled past wait before reading the others. A caller that runs has
// timers late by far less than wait/8, and a silent node still fails
// at wait (the lateness would chain otherwise: each extension fired a
// little late, until the grace's end). Both within the grace.
func (p *patience) until(now time.Time, waited bool) time.Time {
	var until time.Time
	if late := now.Sub(p.due); late > p.wait/8 {
		until = now.Add(late)
	}
	if !waited && lateTogether(p.start, p.last, p.wait) {
		peers := p.graceEnds // none replied: wait for the first
		if !p.last.IsZero() && p.last.Add(p.wait).Before(peers) {
			peers = p.last.Add(p.wait)
		}
		if peers.After(until) {
			until = peers
		}
	}
	if until.After(p.graceEnds) {
		until = p.graceEnds
	}
	return until
}

// lateTogether reports, when a decision's wait has passed, whether the
// nodes are late together rather than some of them dead: none has replied
// (last is zero), or the latest reply, at last, came in the second half of
// the wait, so that its peers are judged against it. Replies that all came
// early say the caller and those nodes run well: the silent ones fail at
// wait.
func lateTogether(start, last time.Time, wait time.Duration) bool {
	return last.IsZero() || last.Sub(start) > wait/2
}

func (t *Tally[T]) closeUnanswered(err error) {
	for i := range t.Votes {
		if !t.Votes[i].Replied {
			t.Votes[i].Err = err
			t.Refused++
		}
	}
}
