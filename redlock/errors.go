package redlock

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

var (
	// ErrNotObtained means the lock is held by someone else: enough nodes
	// hold the key for another value that no majority was possible.
	ErrNotObtained = errors.New("redlock: lock not obtained")

	// ErrNotHeld means a lease is no longer held: its validity ran out, it was
	// already unlocked, or a majority of nodes no longer hold its value. From
	// Unlock it warns that mutual exclusion may have been broken while the
	// caller thought it held the lock.
	ErrNotHeld = errors.New("redlock: lock not held")
)

// errValidityUsedUp is the cause of an acquisition or extension that won a
// majority too late: the time it took left no validity.
var errValidityUsedUp = errors.New("redlock: no validity left once a majority answered")

// Outcome is what one node answered in a round.
type Outcome int

const (
	// Failed: the node returned an error or did not answer in time.
	Failed Outcome = iota
	// Granted: the node did what was asked (set, extended, deleted, or, for
	// Check, holds the value).
	Granted
	// Taken: the key holds another holder's value.
	Taken
	// Missing: the key does not exist on the node.
	Missing
	// Unanswered: the round was decided before this node answered, without
	// waiting for it (its call goes on in the background).
	Unanswered
	// Revoked: an operator's Locker.Revoke deleted this lease's value on the
	// node (an extension or check found the tombstone it left).
	Revoked
)

func (o Outcome) String() string {
	switch o {
	case Granted:
		return "granted"
	case Taken:
		return "held by another value"
	case Missing:
		return "key missing"
	case Unanswered:
		return "not answered before the decision"
	case Revoked:
		return "revoked by an operator"
	default:
		return "failed"
	}
}

// NodeResult is one node's part in a QuorumError.
type NodeResult struct {
	Node    int    // index in the nodes passed to New
	Name    string // the node's address where known, else "node <index>"
	Outcome Outcome
	// Err is set when Outcome is Failed; where it is Unanswered, Err is
	// what the node guard last knew of the node that kept its votes out
	// (a *QuarantineError), if anything.
	Err error
	// Latency is the time from the round's first send to the node's reply, where
	// the Locker has an Observer (0 otherwise, and where it had not replied).
	Latency time.Duration
}

// QuorumError reports a round (acquire, extend, unlock, check) that did not
// win a majority, with every node's outcome.
//
// errors.Is(err, ErrNotObtained) holds when contention alone decided an
// acquisition, errors.Is(err, ErrNotHeld) when nodes answered that a lease's
// value is gone, and errors.Is(err, ctx.Err()) when the caller's context
// ended the round. Otherwise nodes failed: see Nodes.
type QuorumError struct {
	Op      string // "acquire", "extend", "unlock" or "check"
	Key     string
	Keys    []string // a multi-key lease's keys, sorted (Key is the first); nil for one key
	Need    int      // a majority of the nodes
	Granted int      // how many granted
	Nodes   []NodeResult
	Cause   error // ErrNotObtained, ErrNotHeld, the context's error, or nil

	// remedy is what to run when it helps: how to trust new servers that
	// the guard quarantined (see trustRemedy).
	remedy string
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	name := strconv.Quote(e.Key)
	if e.Keys != nil {
		name = describeKeys(e.Keys)
	}
	fmt.Fprintf(&b, "redlock: %s %s: %d of %d nodes granted, %d needed", e.Op, name, e.Granted, len(e.Nodes), e.Need)
	if e.Cause != nil {
		fmt.Fprintf(&b, " (%v)", e.Cause)
	}
	var causes []string // the quarantines' causes said so far: each is said once
	for _, n := range e.Nodes {
		if n.Outcome == Granted {
			continue
		}
		fmt.Fprintf(&b, "; %s: %v", n.Name, n.Outcome)
		if n.Err == nil {
			continue
		}
		if n.Outcome == Unanswered {
			b.WriteString(", and when last examined")
		}
		if q, ok := n.Err.(*QuarantineError); ok && slices.Contains(causes, q.Cause) {
			fmt.Fprintf(&b, ": %v for %v more, as above", ErrNodeQuarantined, q.Left.Round(time.Millisecond))
			continue
		} else if ok {
			causes = append(causes, q.Cause)
		}
		fmt.Fprintf(&b, ": %v", n.Err)
	}
	if e.remedy != "" {
		fmt.Fprintf(&b, "; %s", e.remedy)
	}
	return b.String()
}

// Unwrap returns the cause and each node's error, so that errors.Is and
// errors.As see through to them.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, 0, len(e.Nodes)+1)
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	for _, n := range e.Nodes {
		if n.Err != nil {
			errs = append(errs, n.Err)
		}
	}
	return errs
}

// joinErrors is errors.Join on one line: the errors' messages joined by
// "; ", each still seen by errors.Is and errors.As. A nil error is left
// out; none left is nil, and one is itself. (errors.Join puts each message
// on its own line, which a log line or a wrapped "...: %w" breaks apart.)
func joinErrors(errs ...error) error {
	var kept oneLine
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return kept
}

// oneLine is errors joined by joinErrors.
type oneLine []error

func (e oneLine) Error() string {
	var b strings.Builder
	for i, err := range e {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e oneLine) Unwrap() []error { return e }
