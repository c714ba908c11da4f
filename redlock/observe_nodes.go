package redlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redlock/redlock/quorum"
)

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
