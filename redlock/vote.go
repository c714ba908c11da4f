package redlock

import (
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// reader reads node i's reply to a round's command, with the ballot it
// belongs to (the lease's value, the fencing counters it fills in).
type reader func(b *ballot, i int, cmd *redis.Cmd) (Outcome, error)

// ballot is one round as the transports see it: where each node's reply
// goes (wire.Receiver), and how it becomes the node's vote.
type ballot struct {
	round    *quorum.Round[Outcome]
	read     reader
	calls    *tracker // every call in flight, for Drain
	nodes    []node
	value    string        // the lease's value, for readAcquire
	counters []uint64      // phase-1 fencing counters, which readFenced fills in
	found    []holding     // what each node holds, which readInspect and readRevoke fill in
	passed   *atomic.Int32 // releases that named another Locker's turn, which readRelease counts
	timing   *latencies    // each node's reply time, for events; nil without an Observer
	// contended, if set, is told of each vote that found another value
	// on the key (Taken), on the transport's goroutine: it must not block
	contended func()
	// watched: a guarded round of an observed Locker, whose guard verdicts
	// each node's watch records (see nodeWatch)
	watched bool
}

var _ wire.Receiver = (*ballot)(nil)

// Receive turns node i's reply into its vote, records it for Health, and
// counts the call as over. Both transports deliver every reply here.
func (b *ballot) Receive(i int, r wire.Reply) {
	o, err := vote(b, i, r)
	b.timing.arrived(i, r.Received)
	if o == Taken && b.contended != nil {
		b.contended()
	}
	if b.watched {
		b.nodes[i].watch.verdict(r.Verdict)
	}
	if r.RTT > 0 || (err != nil && !r.Uncounted) {
		b.nodes[i].stats.record(time.Now(), r.RTT, err != nil)
	}
	b.round.Deliver(i, o, err)
	b.calls.done()
}

// vote is the one place where a node's reply, and the verdicts of what rode
// with it, become its vote. The command's reader decides first; then the
// WAIT's verdict (Options.WaitReplicas, WaitAOF) and the node guard's can
// only take a grant back: a write not acknowledged, or a node quarantined
// or not judged, fails the vote (never as contention), while a refusal
// stays what it is (another value on the key is contention however the
// node's memory began).
func vote(b *ballot, i int, r wire.Reply) (Outcome, error) {
	o, err := b.read(b, i, r.Cmd)
	if o == Granted && r.NotReplicated != nil {
		return Failed, r.NotReplicated
	}
	if r.Verdict != nil && err == nil && o == Granted {
		return Failed, r.Verdict
	}
	return o, err
}
