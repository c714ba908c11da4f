package redlock

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fencing tokens (Options.Fencing).
//
// A lease can end under a holder that is paused or whose write is slow in the
// network; the lock cannot stop that holder from writing afterwards, but the
// resource can, if every write carries a token that grows with each
// acquisition and the resource rejects one lower than it has seen.
//
// Each node keeps a permanent counter per lock key. Phase 1, in the acquiring
// script, increments it on every node that grants. The client takes t, the
// largest counter among the nodes that granted before the decision; taking
// the maximum alone would not be monotonic (a node left high by an earlier
// failed attempt could make one acquisition's maximum exceed what a later one
// sees on other nodes). So phase 2 raises the counter to t, while the key
// still holds this value, on the granting nodes; the acquisition succeeds only
// if phase 2 succeeded on a majority within the validity measured from before
// phase 1.
//
// Order: if acquisition A returned before B began, B's phase-1 majority meets
// A's phase-2 majority in some node whose counter was already >= t_A when B
// incremented it, so t_B > t_A. Uniqueness: a node's INCR results never
// repeat (its counter only grows), and the token carries t together with the
// label of a node where t was this acquisition's own INCR result:
// token = t<<8 | label. The label must name the same server in every
// process, so it is the node's rank among the nodes' addresses sorted, not
// its place in the list given to New (two processes may list the servers in
// different orders); processes must name the servers by the same addresses.
// Both hold only while nodes keep their counters: run them with AOF and
// appendfsync always, and maxmemory-policy noeviction
// (see Locker.Durability). Counters never expire: expiring one would restart
// it below tokens already issued. Each costs one small key per lock name per
// node.

// tokenNodeBits is how many low bits of a token name the node.
const tokenNodeBits = 8

// maxFencingNodes is the most nodes a fencing Locker may have.
const maxFencingNodes = 1 << tokenNodeBits

// maxCounter keeps t<<8 within a uint64.
const maxCounter = 1<<(64-tokenNodeBits) - 1

// fence completes a fenced acquisition whose phase-1 round is won (its
// counters filled in by the replies): it returns the token (and a
// multi-key lease's tokens, one per key), after phase 2 where phase 2 is
// needed (raiseCounters), or the round's error.
//
// Phase 2 exists to leave a majority of nodes with a counter at least t.
// Where the phase-1 replies that granted before the decision already show
// t on a majority of the nodes, that holds without phase 2 (a counter
// only grows: once at least t, always at least t), and the acquisition
// is skipped: the fast path. Order and uniqueness rest on nothing else
// (see above). In a steady deployment every node increments in step and a
// fenced acquisition costs one round trip; after a node missed increments,
// one phase 2 brings it back in step. fencedTokens.phase2 reports whether
// it ran.
//
// Either way the token is recorded on the nodes, for Inspect: by phase 2
// where it runs, else by a SET sent unawaited to the node that issued it
// (recordToken).
func (l *Locker) fence(ctx context.Context, phase1 *attemptRound, until time.Time) (fencedTokens, error) {
	var f fencedTokens
	width := max(len(phase1.req.multi), 1) // keys: each has its counter and token
	var one [1]uint64                      // t of a single key, without allocating
	ts := one[:]
	if width > 1 {
		ts, f.tokens = make([]uint64, width), make([]uint64, width)
	}
	lagging := false // some key's t is not on a majority yet
	var ownersOf [1]int
	owners := ownersOf[:0] // the nodes whose counter gave some key's t
	tally := phase1.tally
	for k := range width {
		var t uint64
		owner, atT := -1, 0 // atT: granting nodes whose counter is t
		for i, v := range tally.Votes {
			if !v.Accepted {
				continue // its reply may still be writing its counters
			}
			switch c := phase1.counters[i*width+k]; {
			case owner < 0 || c > t:
				t, owner, atT = c, i, 1
			case c == t:
				atT++
			}
		}
		ts[k] = t
		if !slices.Contains(owners, owner) {
			owners = append(owners, owner)
		}
		tok := t<<tokenNodeBits | l.nodes[owner].label
		if k == 0 {
			f.token = tok
		}
		if f.tokens != nil {
			f.tokens[k] = tok
		}
		lagging = lagging || atT < tally.Need
	}
	if l.opts.unsafe.NoFencingPhase2 { // a test's control (internal/unsafelocker)
		return f, nil
	}
	if !lagging && !l.opts.unsafe.AlwaysFencingPhase2 {
		l.recordToken(ctx, phase1, f, owners)
		return f, nil
	}
	f.phase2 = true
	return f, l.raiseCounters(ctx, phase1, ts, f, until)
}

// fencedTokens are a fenced acquisition's tokens: token, its key's (the
// first key's of a multi-key lease), and a multi-key lease's tokens, one
// per key; phase2 says whether phase 2 ran.
type fencedTokens struct {
	token  uint64
	tokens []uint64
	phase2 bool
}

// all is every key's token: tokens, or for one key token, in one.
func (f fencedTokens) all(one *[1]uint64) []uint64 {
	if f.tokens != nil {
		return f.tokens
	}
	one[0] = f.token
	return one[:]
}

// recordToken is fence's fast path: t is on a majority already, and the
// acquisition does not wait for more. The token is recorded beside the
// counter on the node (or nodes, one per key) whose counter gave t
// (owners), unawaited, so that Inspect shows the token this lease's Token
// reports: which node's label it carries only this decision knows. One
// small script on that node, not phase 2 on every granting node: fenced
// load ran 20% slower with the latter. The caller's cancellation does not
// stop it.
func (l *Locker) recordToken(ctx context.Context, phase1 *attemptRound, f fencedTokens, owners []int) {
	var one [1]uint64
	notOwner := func(i int) error {
		if !slices.Contains(owners, i) {
			return errNotOwner
		}
		return nil
	}
	l.fanOut(context.WithoutCancel(ctx), fan{skip: notOwner, timeout: l.opts.NodeTimeout}, tokenRecordCommand(phase1.req, phase1.value, f.all(&one)), readRecorded)
}

// raiseCounters is fence's phase 2, which raises each key's counter to its
// t (ts) where it lags, on a majority, before until. It goes to the nodes
// that granted phase 1. A pipelined node whose phase-1 reply is still
// outstanding gets it too, queued behind phase 1: the script raises the
// counters only where the keys hold this value, which is as safe there as
// on any granting node. It records the token too, on every node it
// reaches.
func (l *Locker) raiseCounters(ctx context.Context, phase1 *attemptRound, ts []uint64, f fencedTokens, until time.Time) error {
	round1 := phase1.round // the closure takes the round, not phase1, which stays on its caller's stack
	notGranted := func(i int) error {
		select {
		case <-round1.Settled(i):
			if o, err := round1.Result(i); err != nil || o != Granted {
				return errNotGranted
			}
		default:
		}
		return nil
	}
	var one [1]uint64
	c := phase2Command(phase1.req, phase1.value, ts, f.all(&one))
	var timing2 *latencies
	if phase1.timing != nil {
		timing2 = l.timing()
	}
	round2 := l.fanOut(ctx, fan{after: phase1.round, skip: notGranted, timeout: l.opts.NodeTimeout, timing: timing2}, c, readScript)
	left := until.Sub(l.opts.Clock.Now())
	if left <= 0 {
		return l.roundError(ctx, "acquire", phase1.cmd, phase1.tally, phase1.timing) // validity used up in phase 1
	}
	wait := min(l.opts.NodeTimeout, left)
	tally2 := round2.DecideWithin(ctx, wait, l.stallGrace(wait, left), granted)
	if !tally2.Won {
		e := l.roundError(ctx, "acquire", c, tally2, timing2)
		e.Op = "acquire (fencing phase)"
		return e
	}
	return nil
}

// readRecorded reads the token record's reply: how many it wrote.
func readRecorded(_ *ballot, _ int, cmd *redis.Cmd) (Outcome, error) {
	if err := cmd.Err(); err != nil {
		return Failed, err
	}
	return Granted, nil
}

// fencedIn is a fenced acquisition's Event.Detail, by whether phase 2 ran.
func fencedIn(phase2 bool) string {
	if phase2 {
		return FencedInTwoRoundTrips
	}
	return FencedInOneRoundTrip
}

// The Detail of a fenced acquisition's OpAcquire event: whether the
// phase-1 counters agreed on a majority (one round trip), or phase 2 had
// to raise lagging ones.
const (
	FencedInOneRoundTrip  = "fenced in one round trip: the counters agreed on a majority"
	FencedInTwoRoundTrips = "fenced in two round trips: phase 2 raised counters that lagged"
)
