package redlock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// fan says how a round is sent, beyond its command.
type fan struct {
	// after: a node's command is sent only once after's call on that node
	// has returned, so that it cannot overtake it (a release must not reach
	// a node before that node's SET). A pipelined node needs no waiting: its
	// commands run in the order they were queued.
	after *quorum.Round[Outcome]
	// earlier: this Locker's releases of the key, on nodes without a
	// pipeline, to wait for before sending (see calls).
	earlier []chan struct{}
	// skip, if set, says whether node i's command is not sent, and why:
	// called once after has settled on a node without a pipeline, and at
	// queuing time on a pipelined one.
	skip func(i int) error
	// timeout: without a pipeline, each call's context ends this long after
	// the call is sent. That bounds the call for clients that honour context
	// deadlines; the vote is bounded by Decide.
	timeout time.Duration
	// release: the key this round releases, recorded in l.releases for
	// nodes without a pipeline.
	release string
	// releaseAll: a multi-key lease's keys, which the round releases
	// (release is the first)
	releaseAll []string
	// value and counters are what the round's reader reads against: the
	// lease's value, and the phase-1 fencing counters it fills in.
	value    string
	counters []uint64
	// found is where an operator's round (Inspect, Revoke) puts what each
	// node holds for the key; found[i] is written by node i's reply.
	found []holding
	// passed counts the nodes whose release named another Locker's turn
	// (readRelease).
	passed *atomic.Int32
	// timing, if set, records each node's reply time, for events (see
	// Locker.timing).
	timing *latencies
	// contended, if set, is told of each reply that found another value on
	// the key (ballot.contended).
	contended func()
}

// fanOut sends c to every node through its transport and returns the
// round, whose replies read turns into votes (see vote.go).
//
// On a node without a pipeline, a call that may set a lease's value (c's
// Role: an acquisition, fencing's phase 2, an extension) is recorded in
// l.setting until it returns, and a release of that value waits for those
// recorded before it (see calls): a release is the last word of its lease
// on the node, whichever copy of the lease (Lease.Handle, Locker.Resume)
// sent what.
func (l *Locker) fanOut(ctx context.Context, f fan, c wire.Command, read reader) *quorum.Round[Outcome] {
	round := quorum.Begin[Outcome](len(l.nodes))
	b := &ballot{round: round, read: read, calls: &l.inflight, nodes: l.nodes, value: f.value, counters: f.counters, found: f.found, passed: f.passed, timing: f.timing, contended: f.contended}
	b.watched = c.Guarded && f.timing != nil
	l.inflight.add(len(l.nodes))
	if l.pipelined {
		c = c.BindBy(l.sharedDigest(c)) // one wire form, shared by every pipeline
	}
	var setting []chan struct{} // a release's: the calls that may set its value, per node
	if c.Role == wire.RoleReleases && c.Lease != "" {
		setting = l.setting.snapshot(c.Lease)
	}
	for i, n := range l.nodes {
		s := wire.Send{Timeout: f.timeout, Skip: f.skip}
		if !n.pipelined {
			if f.after != nil { // a nil *Round would make a non-nil Settler
				s.After = f.after
			}
			switch {
			case f.earlier != nil:
				s.Await = f.earlier[i]
			case setting != nil:
				s.Await = setting[i]
			}
			switch {
			case f.releaseAll != nil:
				s.Finish = l.releases.startAll(f.releaseAll, i, len(l.nodes))
			case f.release != "":
				s.Finish = l.releases.start(f.release, i, len(l.nodes))
			case setsValue(c):
				s.Finish = l.setting.start(c.Lease, i, len(l.nodes))
			}
		}
		n.link.Submit(ctx, c, s, b, i)
	}
	return round
}

// sharedDigest is the digest most of l's nodes named for c's script
// (luascript.Names.Of; ties go to the first node's), "" for none or no
// script: what the wire form every pipeline shares is bound by. A node
// that named another, or none, gets a form of its own (EVAL: see
// wire.Command.WireFor). Counting this Locker's nodes alone, now, keeps
// other Lockers' nodes, and nodes of the past, out of it.
func (l *Locker) sharedDigest(c wire.Command) string {
	if c.Script == nil {
		return ""
	}
	var named [8]string // on the stack for up to 8 nodes
	ds := named[:0]
	for i := range l.nodes {
		ds = append(ds, l.nodes[i].link.Names().Of(c.Script.Script))
	}
	best, most := "", 0
	for i, d := range ds {
		if d == "" || d == best {
			continue
		}
		count := 0
		for _, e := range ds[i:] {
			if e == d {
				count++
			}
		}
		if count > most {
			best, most = d, count
		}
	}
	return best
}

// setsValue reports whether c may put its lease's value on a node: an
// acquisition, fencing's phase 2, or an extension (which heals).
func setsValue(c wire.Command) bool {
	switch c.Role {
	case wire.RoleSets, wire.RoleFences, wire.RoleExtends:
		return c.Lease != ""
	}
	return false
}
