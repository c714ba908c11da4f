package redlock

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock/internal/guard"
)

// nodeWatch is what an observed Locker has reported of one guarded node:
// whether its votes were kept out of the quorum, and the clock alarms seen.
// The transport records each guarded reply's verdict (verdict, from
// ballot.Receive: an atomic store, never a call to the Observer, which must
// not run under a pipeline's lock); the operation that decided the round
// reports what changed (Locker.reportNodes).
type nodeWatch struct {
	last atomic.Pointer[guard.QuarantineError] // the newest guarded verdict: nil sound, else the quarantine
	seen atomic.Bool                           // a guarded verdict has been recorded

	// What was last reported, written under mu (which serializes reports,
	// so that each change is told once) and read without it by changed,
	// on every observed acquisition.
	mu          sync.Mutex
	quarantined atomic.Bool  // as last reported
	jumps       atomic.Int64 // clock jumps reported
	fast        atomic.Bool  // runs faster than the bound, as last reported
}

// changed reports whether n may have something to report since the last
// report: changes' test without its lock.
func (w *nodeWatch) changed(n *node) bool {
	if w.seen.Load() && (w.last.Load() != nil) != w.quarantined.Load() {
		return true
	}
	if c := n.guard.Clock(); c != nil {
		return int64(c.Jumps()) > w.jumps.Load() || (n.guard.Excess() > 0) != w.fast.Load()
	}
	return false
}

// verdict records a guarded reply's verdict: sound (nil), a quarantine, or
// another error (the guard could not judge: nothing learnt of the
// quarantine).
func (w *nodeWatch) verdict(err error) {
	if w == nil {
		return
	}
	if err == nil {
		w.last.Store(nil)
		w.seen.Store(true)
		return
	}
	var q *guard.QuarantineError // escapes to errors.As: declared only where needed
	if !errors.As(err, &q) {
		return
	}
	w.last.Store(q)
	w.seen.Store(true)
}

// reportNodes tells the Observer what it learns of the nodes from a
// decided round of op (0 for Inspect, which reports no late failures), in
// tally: for a guarded round, every node whose quarantine began or ended,
// or whose clock raised an alarm, since the last report; and the nodes the
// decision did not wait for whose calls then failed (OpLateFailure).
//
// What the nodes that had replied said is reported now. Where some had
// not, the rest is looked at once the last of them has replied
// (quorum.Round.AfterAll), in that reply's Deliver: a verdict is stored
// before its node's Deliver, so every one is seen. Deliver runs on the
// transport's goroutine, which must not call the Observer: when something
// is left to report (rarely), a goroutine reports it, and Drain waits for
// it. Nothing is started, and nothing waits, when nothing is.
func (l *Locker) reportNodes(op Op, key string, round *quorum.Round[Outcome], tally quorum.Tally[Outcome], guarded bool) {
	if !guarded && (op == 0 || !unanswered(tally)) {
		return // nothing to report
	}
	if guarded {
		l.emitAll(l.changes(key))
	}
	if round.Returned() { // most rounds: no func for AfterAll to allocate
		l.emitAll(l.nodeEvents(op, key, round, tally, guarded))
		return
	}
	later := round.AfterAll(func() {
		events := l.nodeEvents(op, key, round, tally, guarded)
		if len(events) == 0 {
			return
		}
		l.inflight.add(1) // before the last call is done: Drain sees it
		go func() {
			defer l.inflight.done()
			l.emitAll(events)
		}()
	})
	if !later { // every call has returned: the rest now
		l.emitAll(l.nodeEvents(op, key, round, tally, guarded))
	}
}

// nodeEvents are reportNodes' events once every call of round has
// returned. It calls no Observer.
func (l *Locker) nodeEvents(op Op, key string, round *quorum.Round[Outcome], tally quorum.Tally[Outcome], guarded bool) []Event {
	var events []Event
	if guarded {
		events = l.changes(key)
	}
	if e, ok := l.lateFailures(op, key, round, tally); ok {
		events = append(events, e)
	}
	return events
}

// emitAll delivers events, in order.
func (l *Locker) emitAll(events []Event) {
	for _, e := range events {
		l.emit(e)
	}
}

// unanswered reports whether the decision in tally left a node not waited for.
func unanswered(tally quorum.Tally[Outcome]) bool {
	for _, v := range tally.Votes {
		if notWaitedFor(v) {
			return true
		}
	}
	return false
}

// notWaitedFor reports whether the decision did not wait for v's node: it
// had not replied, and its vote was closed without an error of its own
// (or by a Lock's attempt that stopped waiting: yielding).
func notWaitedFor(v quorum.Vote[Outcome]) bool {
	return !v.Replied && (v.Err == nil || errors.Is(v.Err, errNotWaitedFor))
}

// lateFailures is the OpLateFailure event of the nodes that tally's
// decision did not wait for whose calls in round (all returned) failed; ok
// is false when there are none.
func (l *Locker) lateFailures(op Op, key string, round *quorum.Round[Outcome], tally quorum.Tally[Outcome]) (e Event, ok bool) {
	if op == 0 {
		return Event{}, false
	}
	var failed []NodeResult
	for i, v := range tally.Votes {
		if !notWaitedFor(v) {
			continue // waited for: in the operation's own event
		}
		if _, err := round.Result(i); err != nil && !errors.Is(err, ErrNodeQuarantined) { // a quarantine has events of its own
			failed = append(failed, NodeResult{Node: i, Name: l.nodes[i].name, Outcome: Failed, Err: asNoReply(err)})
		}
	}
	if len(failed) == 0 {
		return Event{}, false
	}
	names := make([]string, len(failed))
	for i, f := range failed {
		names[i] = fmt.Sprintf("%s: %v", f.Name, f.Err)
	}
	return Event{Op: OpLateFailure, Of: op, Key: key, Nodes: failed, Detail: fmt.Sprintf("%s: %d node(s) not waited for failed afterwards: %s", op, len(failed), strings.Join(names, "; "))}, true
}

// changes returns what changed on each guarded node since the last report.
func (l *Locker) changes(key string) []Event {
	var events []Event
	for i := range l.nodes {
		n := &l.nodes[i]
		if n.watch == nil || n.guard == nil {
			continue
		}
		events = append(events, n.watch.changes(n, key)...)
	}
	return events
}

// changes returns the events of what changed on n since the last report.
func (w *nodeWatch) changes(n *node, key string) []Event {
	if !w.changed(n) {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var events []Event
	one := func(err error) []NodeResult {
		return []NodeResult{{Node: n.index, Name: n.name, Outcome: Failed, Err: err}}
	}
	if w.seen.Load() {
		q := w.last.Load()
		switch {
		case q != nil && !w.quarantined.Load():
			w.quarantined.Store(true)
			events = append(events, Event{Op: OpQuarantine, Key: key, Err: q, Nodes: one(q), Detail: fmt.Sprintf("%s: %s", n.name, q.Cause)})
		case q == nil && w.quarantined.Load():
			w.quarantined.Store(false)
			r := one(nil)
			r[0].Outcome = Granted
			events = append(events, Event{Op: OpQuarantineEnd, Key: key, Nodes: r, Detail: n.name + ": its votes count again"})
		}
	}
	if c := n.guard.Clock(); c != nil {
		if j := c.Jumps(); int64(j) > w.jumps.Load() {
			events = append(events, Event{Op: OpClockAlarm, Key: key, Nodes: one(nil), Detail: fmt.Sprintf("%s: its clock jumped (%d jump(s) seen in all)", n.name, j)})
			w.jumps.Store(int64(j))
		}
		excess := n.guard.Excess()
		if fast := excess > 0; fast != w.fast.Load() {
			w.fast.Store(fast)
			if fast {
				ppm, errPPM, _ := c.Rate()
				events = append(events, Event{Op: OpClockAlarm, Key: key, Nodes: one(nil), Detail: fmt.Sprintf("%s: its clock runs fast by %.0f±%.0f ppm, beyond the drift bound: validity shrinks by %.3g%% of the TTL", n.name, ppm, errPPM, excess*100)})
			}
		}
	}
	return events
}
