package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/redlock/internal/notice"
	"github.com/redlock/redlock/redlock/internal/waitq"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// A Locker acquires leases on a fixed set of independent Redis nodes. It is
// safe for concurrent use.
type Locker struct {
	nodes    []node
	opts     Options
	bound    drift.Bound
	inflight tracker      // every call in flight, for Drain
	releases calls        // releases in flight, per key, which acquisitions wait for (see calls)
	setting  calls        // calls in flight that may set a lease's value, per value, which its releases wait for
	turns    waitq.Queues // Lock calls waiting for each key, in order
	notices  *notice.Hub  // release notices for the keys Lock waits for (nil: Options.NoWakeUps)
	id       string       // this Locker in the keys' lines of waiting Lockers (see joinLine)
	servers  []string     // the nodes' identities, sorted: what a Handle is bound to
	durable  durableCheck
	// pipelined: some node has a pipeline, which shares a round's command
	// in its wire form (wire.Command.Bind)
	pipelined bool
}

// New returns a Locker over nodes. Each node must be a separate Redis master
// (see Node); opts may be nil for the defaults.
func New(nodes []Node, opts *Options) (*Locker, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	wait := wire.NewWait(o.WaitReplicas, o.WaitAOF, o.NodeTimeout)
	ns, err := newNodes(nodes, &o, wait)
	if err != nil {
		return nil, err
	}
	if o.Fencing && len(ns) > maxFencingNodes {
		return nil, fmt.Errorf("redlock: %d nodes: fencing supports at most %d", len(ns), maxFencingNodes)
	}
	if o.RequireDurable && !o.Fencing {
		return nil, errors.New("redlock: Options.RequireDurable needs Options.Fencing")
	}
	if wait != nil {
		for _, n := range ns {
			if err := checkWaitable(n); err != nil {
				return nil, err
			}
		}
	}
	l := &Locker{nodes: ns, opts: o, bound: o.bound(), id: newValue("")}
	for _, n := range ns {
		l.pipelined = l.pipelined || n.pipelined
		l.servers = append(l.servers, n.identity)
	}
	slices.Sort(l.servers)
	if !o.NoWakeUps {
		l.notices = newNotices(ns, &l.turns, o.NodeTimeout, l.id)
		// A client that unlocks and locks again within a poll, after its
		// release named another Locker, waits for its turn (waitq.Join).
		l.turns.PassedFor = drift.Add(o.RetryDelay, o.RetryJitter)
	}
	return l, nil
}

// Drain waits until every call this Locker still has in flight has returned:
// replies from slow nodes, and the releases that follow late grants. Call it
// before the process exits, so that a late grant is not left to expire on its
// own. It returns ctx's error if ctx ends first.
func (l *Locker) Drain(ctx context.Context) error {
	if err := l.made("Drain"); err != nil {
		return err
	}
	if ctx == nil {
		return errors.New("redlock: Drain: nil context")
	}
	return l.inflight.wait(ctx)
}
