package redlock

import (
	"errors"
	"fmt"
	"log"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// An Observer is told of every decision a Locker makes (Options.Observer):
// each acquisition attempt, extension, unlock, check and revocation, and
// what happens in the background (the release of a failed attempt, a grant
// that came after its attempt was decided, a lease lost under Do, a node
// entering or leaving the node guard's quarantine, a node clock alarm).
//
// Observe is called synchronously: a lock operation's event is delivered on
// the caller's goroutine after the nodes decided and before the operation
// returns, so an Observer that blocks delays the lock it observes (and a
// background event delays Drain). It must not block: count, log, or hand
// the event to a buffered channel (see the example). Observe may be called
// from several goroutines at once. The Event and its Nodes are the
// Observer's to keep.
//
// A panicking Observer does not break the operation it observes: the panic
// is recovered, written to the standard logger with its stack (as net/http
// does for a handler's panic), and the operation completes as if nothing
// had observed it. The lease is still returned, the release still sent.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Op names what an Event reports.
type Op uint8

const (
	// OpAcquire is one acquisition attempt: TryLock, or each of Lock's (and
	// Do's) attempts, numbered by Event.Attempt. Err is nil when it won;
	// errors.Is(Err, ErrNotObtained) under contention. A fenced one that
	// won says in Detail whether it took one round trip
	// (FencedInOneRoundTrip) or two (FencedInTwoRoundTrips).
	OpAcquire Op = iota + 1
	// OpExtend is Lease.Extend, including Do's background extensions.
	OpExtend
	// OpUnlock is Lease.Unlock, including Do's release.
	OpUnlock
	// OpCheck is Lease.Check.
	OpCheck
	// OpRevoke is Locker.Revoke: an operator's forced release. Detail says
	// who revoked (Options.Owner) and which values the nodes held.
	OpRevoke
	// OpRelease is the release of a failed attempt, reported in the
	// background once every node has answered it (each at most its TTL
	// later). Err is nil when every node that had granted the attempt
	// deleted it; otherwise it names the nodes where the key is left to
	// expire on its own.
	OpRelease
	// OpLateGrant reports nodes that granted a failed attempt after it was
	// decided (their replies came too late to count), whose keys the
	// release then deleted. Nodes lists only those nodes. Background.
	OpLateGrant
	// OpLost is a lease lost while Do's function ran: nodes refuted it, or
	// its validity ran out before an extension succeeded. Err matches
	// ErrLost. Reported when Do notices, as it cancels the function.
	OpLost
	// OpQuarantine is a node whose votes the node guard began to keep out
	// of the quorum (its memory or clock is not to be trusted yet): the
	// first guarded reply judged so since the node's votes last counted.
	// Nodes holds that node; Err its *QuarantineError (errors.Is matches
	// ErrNodeQuarantined), Detail the cause.
	OpQuarantine
	// OpQuarantineEnd is a node whose votes count again: the first guarded
	// reply judged sound after an OpQuarantine.
	OpQuarantineEnd
	// OpClockAlarm is a node whose clock was seen to jump, or measured to
	// run faster than the drift bound allows (validity then shrinks by the
	// excess: see NodeHealth). Nodes holds that node; Detail what was seen.
	OpClockAlarm
	// OpLateFailure reports nodes that a decision did not wait for (a
	// majority had answered first) whose calls then failed: a frozen node's
	// timeout, a refused connection (not a quarantined vote: OpQuarantine
	// reports that). Without it a node
	// that keeps timing out is invisible while the others decide early.
	// Of is the round's operation; Nodes lists only those nodes.
	// Background.
	OpLateFailure
	// OpResume is Locker.Resume: a lease taken over from a Handle.
	OpResume
)

var opNames = [...]string{
	OpAcquire:       "acquire",
	OpExtend:        "extend",
	OpUnlock:        "unlock",
	OpCheck:         "check",
	OpRevoke:        "revoke",
	OpRelease:       "release",
	OpLateGrant:     "late grant",
	OpLost:          "lost",
	OpQuarantine:    "quarantine",
	OpQuarantineEnd: "quarantine end",
	OpClockAlarm:    "clock alarm",
	OpLateFailure:   "late failure",
	OpResume:        "resume",
}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Ops lists every Op, in the order of their values.
func Ops() []Op {
	ops := make([]Op, 0, len(opNames)-1)
	for o := OpAcquire; int(o) < len(opNames); o++ {
		ops = append(ops, o)
	}
	return ops
}

// An Event is one decision or background happening (see Observer).
type Event struct {
	Op  Op
	Key string // the lock's key ("" for a node event on no particular key)
	// Attempt is the attempt's number within Lock (1 for TryLock, and for
	// the first); for OpRelease and OpLateGrant, the attempt released. 0
	// for other operations.
	Attempt int
	// Duration is how long the operation took, on the Locker's clock: from
	// before its first send to its decision (for OpRelease, to the last
	// node's answer; for OpLost, how long the lease had been held).
	Duration time.Duration
	// Err is nil on success; otherwise the very error the caller got (for
	// background events, what went wrong).
	Err error
	// Token is the lease's fencing token, where fencing issued one.
	Token uint64
	// Validity is the validity the lease got, for a successful acquisition
	// or extension.
	Validity time.Duration
	// Nodes is each node's outcome and latency in the round, in node order
	// (the same as a *QuorumError's, on success too), or for node events
	// the one node concerned.
	Nodes []NodeResult
	// Detail says more, in words, where the Op needs it: a quarantine's
	// cause, what a clock alarm saw, who revoked.
	Detail string
	// Of is, for OpLateFailure, the operation whose round it follows.
	Of Op
	// Stalled reports, for an acquisition, extension, unlock or check,
	// that every node missed NodeTimeout together, or the latest reply came
	// in its second half, or (but for an unlock) the round's timer fired
	// late, so that the round, taking this process's own stall
	// (scheduling, GC) for the likelier cause, waited on for them (see
	// ErrClientStalled). Duration says how long it took in all.
	Stalled bool
}

// observed reports whether the Locker has an Observer.
func (l *Locker) observed() bool { return l.opts.Observer != nil }

// emit delivers e to the Observer, recovering from its panic (see
// Observer).
func (l *Locker) emit(e Event) {
	defer func() {
		if r := recover(); r != nil {
			log.Printf("redlock: Options.Observer panicked on a %v event for %q (recovered; the operation went on): %v\n%s", e.Op, e.Key, r, debug.Stack())
		}
	}()
	l.opts.Observer.Observe(e)
}

// latencies records when each node's reply to one round arrived, for
// events (allocated only when the Locker has an Observer). at[i] is the
// time from start to node i's reply, plus one nanosecond (0: none yet).
type latencies struct {
	start  time.Time
	at     []atomic.Int64
	inline [inlineNodes]atomic.Int64 // at for up to inlineNodes nodes: one allocation per round, not two
	// nodes holds the round's event's Nodes for up to inlineNodes nodes
	// (eventNodes), in the same allocation: an observed operation
	// allocates once for its timing and its event, not twice.
	nodes [inlineNodes]NodeResult
}

// inlineNodes is how many nodes' timing and results latencies holds in
// itself: five, the usual deployment's (and three's); with seven the
// struct went from 384 to 512 bytes, a seventh more of an observed cycle's
// allocation, for every deployment.
const inlineNodes = 5

func newLatencies(n int) *latencies {
	t := &latencies{start: time.Now()}
	if n <= len(t.inline) {
		t.at = t.inline[:n]
	} else {
		t.at = make([]atomic.Int64, n)
	}
	return t
}

// arrived records node i's reply, which came back at received (zero:
// now).
func (t *latencies) arrived(i int, received time.Time) {
	if t == nil {
		return
	}
	if received.IsZero() {
		received = time.Now()
	}
	t.at[i].Store(int64(max(received.Sub(t.start), 0)) + 1)
}

// of is node i's latency, 0 where it has not replied.
func (t *latencies) of(i int) time.Duration {
	if t == nil {
		return 0
	}
	if d := t.at[i].Load(); d > 0 {
		return time.Duration(d - 1)
	}
	return 0
}

// results is every node's part in a decided round: the same data a
// *QuorumError carries, with latencies where t timed them. explain turns a
// node's error into the one the caller sees (nil: as it is).
func (l *Locker) results(tally quorum.Tally[Outcome], t *latencies, explain func(error) error) []NodeResult {
	return l.resultsInto(make([]NodeResult, len(tally.Votes)), tally, t, explain)
}

// resultsInto is results, written into out (one element per vote).
func (l *Locker) resultsInto(out []NodeResult, tally quorum.Tally[Outcome], t *latencies, explain func(error) error) []NodeResult {
	for i, v := range tally.Votes {
		err := asStalled(v.Err)
		if explain != nil {
			err = explain(err)
		}
		if !v.Replied || errors.Is(err, wire.ErrNodeTimeout) {
			// No reply in time, whether the vote closed first or the
			// call's own deadline did (the two race on the direct
			// transport): the same error to errors.Is, with what the
			// node's dial met where that is known.
			err = l.nodes[i].dials.withDialCause(asNoReply(err), l.dialWindow(tally.Late))
		}
		out[i] = NodeResult{Node: i, Name: l.nodes[i].name, Outcome: v.Value, Err: err, Latency: repliedIn(v, t, i)}
		switch {
		case errors.Is(v.Err, errNotWaitedFor):
			out[i].Outcome = Unanswered // a Lock's attempt stopped waiting for it (yielding)
		case v.Err != nil:
			out[i].Outcome = Failed
		case !v.Replied:
			out[i].Outcome = Unanswered
		}
	}
	return out
}

// nodeResultsOf is the Nodes of the event about a round, timed by t, that
// ended in err: a copy of the *QuorumError's own where err is one, else
// results. It is called once per round: the slice is t's own storage.
func (l *Locker) nodeResultsOf(err error, tally quorum.Tally[Outcome], t *latencies) []NodeResult {
	if e, ok := err.(*QuorumError); ok && len(e.Nodes) == len(tally.Votes) {
		out := t.eventNodes(len(e.Nodes))
		copy(out, e.Nodes)
		for i := range out {
			out[i].Latency = repliedIn(tally.Votes[i], t, i)
		}
		return out
	}
	return l.resultsInto(t.eventNodes(len(tally.Votes)), tally, t, nil)
}

// repliedIn is node i's latency in a decided round, timed by t: 0 where
// its reply was not part of the decision. A reply that came after the
// decision, while the event was being made, is timed too, but it is not
// this round's: reported, it would read as a node slower than the whole
// operation.
func repliedIn(v quorum.Vote[Outcome], t *latencies, i int) time.Duration {
	if !v.Replied {
		return 0
	}
	return t.of(i)
}

// eventNodes is storage for the Nodes of the one event about t's round:
// t's own for up to 7 nodes, else a new slice.
func (t *latencies) eventNodes(n int) []NodeResult {
	if t != nil && n <= len(t.nodes) {
		return t.nodes[:n:n]
	}
	return make([]NodeResult, n)
}

// timing returns a new round's latencies if the Locker has an Observer,
// else nil (nothing recorded, nothing allocated).
func (l *Locker) timing() *latencies {
	if !l.observed() {
		return nil
	}
	return newLatencies(len(l.nodes))
}

// watchRelease reports, in the background, the release of a failed
// attempt (OpRelease) and the grants that came after its decision
// (OpLateGrant), once every node has answered both the acquisition and its
// release. Drain waits for it.
func (l *Locker) watchRelease(a attemptRound, released *quorum.Round[Outcome], timing *latencies) {
	key, attempt, start, acquired, decided := a.req.key, a.n, a.start, a.round, a.tally
	l.inflight.add(1)
	go func() {
		defer l.inflight.done()
		acquired.Wait()
		released.Wait()
		var late, results []NodeResult
		var left []string
		anyGranted := false
		for i := range l.nodes {
			o, err := acquired.Result(i)
			wasGranted := err == nil && o == Granted
			ro, rerr := released.Result(i)
			r := NodeResult{Node: i, Name: l.nodes[i].name, Outcome: ro, Err: rerr, Latency: timing.of(i)}
			switch {
			case errors.Is(rerr, errNothingToRelease):
				r.Outcome, r.Err = Taken, nil // it refused the SET: nothing was sent, nothing to release
			case rerr != nil:
				r.Outcome = Failed
			}
			results = append(results, r)
			if !wasGranted {
				continue
			}
			anyGranted = true
			if !decided.Votes[i].Replied {
				late = append(late, NodeResult{Node: i, Name: l.nodes[i].name, Outcome: Granted})
			}
			if r.Outcome == Failed { // Missing: it expired; Taken: it expired and another holder took it
				left = append(left, fmt.Sprintf("%s: %v", r.Name, releaseFailure(r)))
			}
		}
		if len(late) > 0 {
			l.emit(Event{Op: OpLateGrant, Key: key, Attempt: attempt, Duration: l.opts.Clock.Now().Sub(start), Nodes: late, Detail: fmt.Sprintf("%d node(s) granted after the attempt was decided; the release followed", len(late))})
		}
		if !anyGranted {
			return // nothing was set: nothing to report
		}
		e := Event{Op: OpRelease, Key: key, Attempt: attempt, Duration: l.opts.Clock.Now().Sub(start), Nodes: results}
		if len(left) > 0 {
			e.Err = fmt.Errorf("redlock: release of %q after a failed attempt: the key is left to expire on %d node(s): %s", key, len(left), strings.Join(left, "; "))
		}
		l.emit(e)
	}()
}

// releaseFailure says why a release did not delete the key on a node.
func releaseFailure(r NodeResult) any {
	if r.Err != nil {
		return r.Err
	}
	return r.Outcome
}

// noReplyError is a call that ran out of its own time (wire.ErrNodeTimeout):
// it reads as quorum.ErrNoReply too, so that callers test one error for "the
// node did not answer in time" whichever deadline fired first.
type noReplyError struct{ error }

func (e noReplyError) Is(target error) bool { return target == quorum.ErrNoReply }
func (e noReplyError) Unwrap() error        { return e.error }

// asNoReply is err as noReplyError where it is a call's own timeout.
func asNoReply(err error) error {
	if !errors.Is(err, wire.ErrNodeTimeout) || errors.Is(err, quorum.ErrNoReply) {
		return err
	}
	return noReplyError{err}
}
