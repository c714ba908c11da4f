package redlock

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlock/redlock/redlock/internal/guard"
	"github.com/redlock/redlock/redlock/internal/reply"
	"github.com/redlock/redlock/redlock/internal/wire"
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

// errDoing refuses a Lease.Do on a lease already running under Do.
var errDoing = errors.New("the lease already runs under Do")

// ErrLost means a lease was lost while the work it protected was running:
// nodes answered that it was gone, or its validity ran out. Work done under
// it may have overlapped another holder's.
var ErrLost = errors.New("redlock: lease lost")

// ErrNotDurable is returned, when Options.RequireDurable is set, by a fenced
// acquisition while a majority of nodes would not keep their fencing
// counters across a crash. Locker.Durability says which nodes fall short.
var ErrNotDurable = errors.New("redlock: nodes would not keep fencing counters across a crash")

// ErrOtherNodes is Resume's error for a handle of a lease on other servers
// than the Locker's.
var ErrOtherNodes = errors.New("redlock: the handle's lease lives on other nodes than this Locker's")

// errNotGranted is phase 2's answer for a node that did not grant phase 1.
var errNotGranted = errors.New("redlock: node did not grant the acquisition")

// errNotOwner is the token record's answer for a node whose counter gave
// no key's t: the record goes to the nodes that issued the token.
var errNotOwner = errors.New("redlock: node did not issue the token")

// errNothingToRelease is a failed attempt's release on a node that refused
// the SET: not sent.
var errNothingToRelease = errors.New("redlock: not sent: the node refused the SET, so holds nothing to release")

// errNotReleased is a failed attempt's release that a negative control of
// the simulator skipped (internal/unsafelocker).
var errNotReleased = errors.New("redlock: not sent: the release on failure is switched off (a negative control)")

// errNotWaitedFor is the vote of a node a Lock's attempt stopped waiting
// for (see yielding): a reply not come before the attempt's deadline, as
// quorum.ErrNoReply.
var errNotWaitedFor error = noReplyError{errors.New("redlock: not waited for: another holder's value was seen on the key, and Lock tries again rather than hold its grants while this node answers")}

// ErrNodeQuarantined matches the vote of a node that the node guard keeps
// out of the quorum for now: its memory began less than Options.MaxTTL ago,
// so a key it granted before may still be held by someone, or its clock
// jumped forward less than MaxTTL ago, so a key it granted before the jump
// may have expired early. The *QuorumError names the node, the cause and
// how long is left. The guard itself, and why it works as it does, is in
// internal/guard.
var ErrNodeQuarantined = guard.ErrNodeQuarantined

// QuarantineError is a quarantined node's vote, in a QuorumError's Nodes:
// how long is left (Left; 0: for that round trip only), why (Cause), and
// whether the node's memory began recently (Forgot: a server new to the
// deployment or one that forgot, which TrustNodes may lift for servers
// known to hold no locks) rather than its clock jumping. errors.Is(err,
// ErrNodeQuarantined) matches it.
type QuarantineError = guard.QuarantineError

// errClusterTrustedByHand is TrustNewNodes' error for a Redis Cluster
// node: its markers are per hash slot, and no check of 16,384 of them
// could be made again at the trust's moment as cheaply as one marker's.
var errClusterTrustedByHand = errors.New("a Redis Cluster node is not trusted by TrustNewNodes: trust it by hand once it is known to hold no locks (redlock-admin trust -yes, or Locker.TrustNodes)")

// ErrDuplicateNode matches a node that answers as the same server as
// another node of the Locker: New's or Warm's refusal of the pair, the node
// guard's failed vote of the node that does not count (in a *QuorumError and
// the Observer's events), and NodeHealth.Duplicate. The error names both
// nodes.
var ErrDuplicateNode = guard.ErrDuplicateNode

// ErrNotReplicated matches the vote of a node that granted (set, extended,
// or raised a fencing counter) but whose replicas did not acknowledge the
// write in time under Options.WaitReplicas, or whose AOF fsync was not
// acknowledged under Options.WaitAOF. Such a node counts as failed, never as
// contention; a key it set is released like any failed attempt's.
//
// The WAIT follows the command on the command's own connection, which only
// a *redis.Client or a *redis.ClusterClient offers (New refuses other nodes
// with WaitReplicas or WaitAOF); the transport places it (internal/wire).
var ErrNotReplicated = wire.ErrNotReplicated

// ErrNoPermission matches a node's refusal under its access control list:
// the user the client logs in as may not run a command the library sends, a
// command one of its scripts calls, or touch the key. Such a node's vote
// fails (it is never counted as contention), and the error says which
// command or script was refused and what the script calls. docs/operations.md's
// "Least-privilege ACL" section lists everything the library needs.
var ErrNoPermission = reply.ErrNoPermission

// ErrClientStalled is the error of a node that had not replied when a
// round gave up waiting, where every node had missed NodeTimeout together
// and stayed silent for as long as the round could wait: a stall of this
// client (its scheduling, GC, or network) is likelier than of every node.
// It matches quorum.ErrNoReply, as any missing reply does. The Event of a
// round that waited on for every node late together has Stalled set,
// whether or not they answered then.
var ErrClientStalled error = stalledError{}

// ErrReservedName matches the error for a key that names something the
// library writes (see keys.go's list): a fencing counter, a tombstone, a
// line, a release channel, or the node guard's marker.
var ErrReservedName = errors.New("redlock: the name is reserved")

// ReservedNameError is the error for a key that names something the library
// writes: the operation, the key, and what the name is.
type ReservedNameError struct {
	Op, Key string
	What    string // e.g. `the fencing counter of lock "k"`
}

func (e *ReservedNameError) Error() string {
	return fmt.Sprintf("redlock: %s %q: the name is reserved: it is %s", e.Op, e.Key, e.What)
}

func (e *ReservedNameError) Is(target error) bool { return target == ErrReservedName }
