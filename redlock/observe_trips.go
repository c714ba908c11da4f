package redlock

import (
	"log"
	"runtime/debug"
	"time"

	"github.com/redlock/redlock/redlock/internal/wire"
)

// A RoundTripObserver is an Observer that also hears of every round trip
// that carries the Locker's lock commands to a node (acquisitions,
// extensions, releases, checks, revocations, fencing's, Inspect's reads):
// the exchanges on the wire, where an Event reports a decision. The node
// guard's examinations, Health's, Warm's and TrustNodes' reads, and a
// pipeline's rerun of commands after NOSCRIPT (part of its batch's trip)
// are not reported. On a node's auto-pipeline one round trip carries a
// batch of commands, from as many lock operations as were waiting for the
// node; on the direct transport (Options.NoAutoPipeline, or a Node that is
// not a *redis.Client) each command is a round trip of its own. Round
// trips that come back after their decision are reported too: a node
// slower than the majority shows in them, though no decision waited for
// it. Network-level instrumentation (a database-client histogram, as
// go-redis's own records one point per pipeline) wants these; what a lock
// operation saw of each node is in its Event's Nodes.
//
// ObserveRoundTrip is called on the goroutine that made the round trip (a
// node's pipeline sender, or a direct call's goroutine), once the node
// guard and a WAIT have judged its replies and before they are delivered
// (so Drain waits for it): it must not block, or it delays every command
// waiting for that node. It can change no verdict. It may be called from
// several goroutines at once.
// A panic in it is recovered and logged, as Observe's is. The Locker finds
// it by asking its Observer (Options.Observer.(RoundTripObserver)): a
// wrapper around an Observer (one that counts, or sends to two) must offer
// ObserveRoundTrip too and pass it on, or round trips stop at the wrapper.
type RoundTripObserver interface {
	Observer
	ObserveRoundTrip(RoundTrip)
}

// A RoundTrip is one exchange with one node (see RoundTripObserver).
type RoundTrip struct {
	Node int    // the node's index in the Locker's nodes
	Name string // the node's name, as NodeResult.Name gives it
	// Command is the name of the first command it carried, in lower case
	// as go-redis gives it: "set" (a plain acquisition), "evalsha" (the
	// scripts: extend, unlock, check, revoke, a fenced acquisition, also
	// where a node without the script had it resent as EVAL), or another
	// the Locker sent (Inspect's).
	Command string
	// Commands is how many of the Locker's commands it carried: 1 on the
	// direct transport; on a pipeline, the batch's. The node guard's
	// companions and a WAIT that rode with them are not counted.
	Commands int
	// Duration is from its send to its return: for a pipeline's batch, its
	// first trip (commands run again after NOSCRIPT are not timed apart);
	// for a direct call, the whole call.
	Duration time.Duration
	// Err is nil when every command got its reply (a nil reply is one: SET's
	// grant), else the first failure: the node's error reply, a refused
	// connection, no reply in time (errors.Is(Err, quorum.ErrNoReply)), or
	// on the direct transport the caller's context ending first (its
	// error).
	// A reply the node guard or a WAIT then refuted is not a failed round
	// trip: the Event's Nodes say so.
	Err error
}

// tripReporter returns what node i's transport calls with each round trip
// it makes, named name: it counts the trip in the node's recent record
// (Health) where the transport times batches (pipelined), and hands it to
// o where o asks for round trips. Nil where there is nothing to do.
func tripReporter(o Observer, i int, name string, stats *nodeStats, pipelined bool) func(wire.RoundTrip) {
	to, observed := o.(RoundTripObserver)
	switch {
	case !observed && !pipelined:
		return nil
	case !observed:
		return func(t wire.RoundTrip) { stats.trip(t.Received, t.Received.Sub(t.Sent)) }
	}
	return func(t wire.RoundTrip) {
		if pipelined {
			stats.trip(t.Received, t.Received.Sub(t.Sent))
		}
		observeTrip(to, RoundTrip{Node: i, Name: name, Command: t.Command, Commands: t.Commands, Duration: t.Received.Sub(t.Sent), Err: asNoReply(t.Err)})
	}
}

// observeTrip hands t to o, recovering from its panic (see Observer).
func observeTrip(o RoundTripObserver, t RoundTrip) {
	defer func() {
		if r := recover(); r != nil {
			log.Printf("redlock: Options.Observer panicked on a round trip to %s (recovered; the replies were delivered): %v\n%s", t.Name, r, debug.Stack())
		}
	}()
	o.ObserveRoundTrip(t)
}
