package redlock

import (
	"time"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// A stalled client is not a dead node.
//
// NodeTimeout is there so that a dead or frozen minority cannot eat a
// lease's validity: the others decide, and a silent node fails once
// NodeTimeout has passed. But when every node misses NodeTimeout together,
// the likelier cause is this process: a busy host's scheduler, a GC
// pause, in which the replies wait unread (the same stall makes them all
// late at once; a dead minority cannot). Failing them all then fails a
// healthy cluster for the client's own pause: on a loaded two-core host
// that was every few acquisitions, and an Unlock that fails so leaves its
// keys behind until their TTL.
//
// So a round judges its nodes against their peers (quorum.DecideWithin):
// where NodeTimeout passes before any node has replied, or after a reply
// in its second half, the nodes still out get NodeTimeout from the latest
// reply. The wait is bounded by what the operation can spend: an
// acquisition's or extension's validity budget, a lease's validity left
// for its extension and check, and in all by StallAfter (ten
// NodeTimeouts, at least half a second), past which the pipeline takes a
// node for dead too. An Unlock waits for its nodes as long as the lease
// had validity left, within the same bounds (releaseWait). Safety is
// unchanged: validity still counts from before the first send, on the
// monotonic clock, and a round that waited longer only has less of it
// (checked, as always). A frozen minority is still failed at NodeTimeout
// whenever its peers answered in the first half of it.
//
// Those signs are read from the replies; one shape hides from them: a
// reply in the first half of NodeTimeout, then the client stalled past it
// before reading the others (on a loaded host, "2 of 5 granted"). So the
// round also watches itself: its timer, due at NodeTimeout, fires late
// when the client was not running, and the goroutines that read the
// replies were not running either; the nodes still out then get as long
// again as the timer was late, within the same bounds. Lateness up to an
// eighth of NodeTimeout is a running client's jitter, not a stall: a
// frozen minority still fails at NodeTimeout, give or take it.
// Why the timer, and not a node's own time from when its command was
// written, judged against what it usually takes: the stall in this shape
// comes after the writes, so a node timed from its write is as late as
// one timed from the round's start; and a node's usual time says nothing
// of whether this client or that node stopped. Only a clock the client
// itself reads late tells a stalled client from a dead node, and the
// round's timer is that clock, free: no goroutine, no ticker. What it
// misses: a stall that ends just before NodeTimeout, whose replies the
// readers have not caught up with when the timer fires on time.

type stalledError struct{}

func (stalledError) Error() string {
	return "redlock: no reply before the deadline; every node late together: the client stalled (or its network)"
}

func (stalledError) Is(target error) bool {
	return target == quorum.ErrNoReply || target == quorum.ErrAllLate
}

// stallGrace is how much longer than wait a round waits for its nodes when
// every one of them missed wait together (see above): up to StallAfter in
// all, and never past left, what the operation can spend.
func (l *Locker) stallGrace(wait, left time.Duration) time.Duration {
	return max(0, min(wire.StallAfter(l.opts.NodeTimeout), left)-wait)
}

// releaseWait is how long an Unlock waits for its nodes: as long as the
// lease had validity left, at least NodeTimeout and at most StallAfter.
// A release eats no validity, and waiting is all it costs; an Unlock
// failed for slow replies (on a starved host, a majority's replies read
// past NodeTimeout, not all at once) leaves the keys for their TTL.
func (l *Locker) releaseWait(left time.Duration) time.Duration {
	return max(l.opts.NodeTimeout, min(wire.StallAfter(l.opts.NodeTimeout), left))
}

// noneWithin reports whether no node of t's round replied within d of
// its start: every node late together (Event.Stalled of an Unlock).
func (t *latencies) noneWithin(d time.Duration) bool {
	if t == nil {
		return false
	}
	for i := range t.at {
		if at := t.at[i].Load(); at > 0 && time.Duration(at-1) <= d {
			return false
		}
	}
	return true
}

// asStalled is err as ErrClientStalled where the round gave up on every
// node late together.
func asStalled(err error) error {
	if err == quorum.ErrAllLate {
		return ErrClientStalled
	}
	return err
}
