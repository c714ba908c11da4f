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
// reports what changed (Locker.reportNodes), on its own goroutine.
type nodeWatch struct {
	last atomic.Pointer[guard.QuarantineError] // the newest guarded verdict: nil sound, else the quarantine
	seen atomic.Bool                           // a guarded verdict has been recorded

	mu          sync.Mutex // serializes reports, so that each change is told once
	quarantined bool       // as last reported
	jumps       int        // clock jumps reported
	fast        bool       // runs faster than the bound, as last reported
}

// verdict records a guarded reply's verdict: sound (nil), a quarantine, or
// another error (the guard could not judge: nothing learnt of the
// quarantine).
func (w *nodeWatch) verdict(err error) {
	if w == nil {
		return
	}
	var q *guard.QuarantineError
	switch {
	case err == nil:
		w.last.Store(nil)
	case errors.As(err, &q):
		w.last.Store(q)
	default:
		return
	}
	w.seen.Store(true)
}

// reportNodes tells the Observer what it learns of the nodes from a
// decided round of op (0 for Inspect, which reports no late failures), in
// tally: for a guarded round, every node whose
// quarantine began or ended, or whose clock raised an alarm, since the last
// report; and the nodes the decision did not wait for whose calls then
// failed (OpLateFailure). Where nodes had not replied by the decision,
// their part comes later, and is reported in the background once every
// node has replied (Drain waits for it).
//
// Which nodes have settled is read before the report: a verdict is stored
// before its node settles, so a node settled then is in this report, and a
// node that settles later (even before this report reads its verdict) is
// in the background one.
func (l *Locker) reportNodes(op Op, key string, round *quorum.Round[Outcome], tally quorum.Tally[Outcome], guarded bool) {
	pending := false
	for i := range l.nodes {
		select {
		case <-round.Settled(i):
			continue
		default:
		}
		pending = true
		break
	}
	if guarded {
		l.reportChanges(key)
	}
	if !pending {
		l.reportLateFailures(op, key, round, tally) // every call has returned
		return
	}
	if !guarded && (op == 0 || !unanswered(tally)) {
		return // nothing left to report
	}
	l.inflight.add(1)
	go func() {
		defer l.inflight.done()
		round.Wait()
		if guarded {
			l.reportChanges(key)
		}
		l.reportLateFailures(op, key, round, tally)
	}()
}

// unanswered reports whether the decision in tally left a node not waited for.
func unanswered(tally quorum.Tally[Outcome]) bool {
	for _, v := range tally.Votes {
		if !v.Replied && v.Err == nil {
			return true
		}
	}
	return false
}

// reportLateFailures emits OpLateFailure for the nodes that tally's
// decision did not wait for whose calls in round (all returned) failed.
func (l *Locker) reportLateFailures(op Op, key string, round *quorum.Round[Outcome], tally quorum.Tally[Outcome]) {
	if op == 0 {
		return
	}
	var failed []NodeResult
	for i, v := range tally.Votes {
		if v.Replied || v.Err != nil {
			continue // waited for: in the operation's own event
		}
		if _, err := round.Result(i); err != nil && !errors.Is(err, ErrNodeQuarantined) { // a quarantine has events of its own
			failed = append(failed, NodeResult{Node: i, Name: l.nodes[i].name, Outcome: Failed, Err: asNoReply(err)})
		}
	}
	if len(failed) == 0 {
		return
	}
	names := make([]string, len(failed))
	for i, f := range failed {
		names[i] = fmt.Sprintf("%s: %v", f.Name, f.Err)
	}
	l.emit(Event{Op: OpLateFailure, Of: op, Key: key, Nodes: failed, Detail: fmt.Sprintf("%s: %d node(s) not waited for failed afterwards: %s", op, len(failed), strings.Join(names, "; "))})
}

// reportChanges emits what changed on each node since the last report.
func (l *Locker) reportChanges(key string) {
	for i := range l.nodes {
		n := &l.nodes[i]
		if n.watch == nil || n.guard == nil {
			continue
		}
		for _, e := range n.watch.changes(n, key) {
			l.emit(e)
		}
	}
}

// changes returns the events of what changed on n since the last report.
func (w *nodeWatch) changes(n *node, key string) []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	var events []Event
	one := func(err error) []NodeResult {
		return []NodeResult{{Node: n.index, Name: n.name, Outcome: Failed, Err: err}}
	}
	if w.seen.Load() {
		q := w.last.Load()
		switch {
		case q != nil && !w.quarantined:
			w.quarantined = true
			events = append(events, Event{Op: OpQuarantine, Key: key, Err: q, Nodes: one(q), Detail: fmt.Sprintf("%s: %s", n.name, q.Cause)})
		case q == nil && w.quarantined:
			w.quarantined = false
			r := one(nil)
			r[0].Outcome = Granted
			events = append(events, Event{Op: OpQuarantineEnd, Key: key, Nodes: r, Detail: n.name + ": its votes count again"})
		}
	}
	if c := n.guard.Clock(); c != nil {
		if j := c.Jumps(); j > w.jumps {
			events = append(events, Event{Op: OpClockAlarm, Key: key, Nodes: one(nil), Detail: fmt.Sprintf("%s: its clock jumped (%d jump(s) seen in all)", n.name, j)})
			w.jumps = j
		}
		excess := n.guard.Excess()
		if fast := excess > 0; fast != w.fast {
			w.fast = fast
			if fast {
				ppm, errPPM, _ := c.Rate()
				events = append(events, Event{Op: OpClockAlarm, Key: key, Nodes: one(nil), Detail: fmt.Sprintf("%s: its clock runs fast by %.0f±%.0f ppm, beyond the drift bound: validity shrinks by %.3g%% of the TTL", n.name, ppm, errPPM, excess*100)})
			}
		}
	}
	return events
}
