package guard

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// How the node guard keeps one server from voting twice.
//
// Redlock's majority assumes independent nodes, and a Locker can be given
// one server under two names that New cannot tell apart ("127.0.0.1:6379"
// and a DNS name of the same host, a Ring or a wrapper over a client, two
// Sentinel clients of one master set, two ClusterClients of one cluster).
// That server, with one other node failing, wins a quorum of three alone.
// Every examination reads the run_id of the server process that answered
// (examine.lua writes it into the marker, as "<run_id>@<node id>" on a
// Redis Cluster, where it is the master of the marker's slot), and the
// guards of one Locker's nodes share what they read (Identities): of the
// nodes that answer as one server, one owns it, and the others' votes fail
// with a DuplicateError (ErrDuplicateNode) naming the owner.
//
// Which node owns a server: the first examined as it, unless a node earlier
// in the list is examined as it before the owner's votes ever counted; then
// the earlier one takes it over. So the owner is the earlier of the two
// once Warm or TrustNodes has examined them, and the choice never changes
// while both keep answering as that server. A vote the owner cast cannot be
// taken back, so a node that comes second once the owner's votes counted
// stays out: letting it in instead could count the server twice in a round
// that began before the change (the owner's vote judged before it, the
// other's after). The check and the record of the owner's counting vote
// are one step under a lock (counts), and so is a takeover: of two guards
// examining one server at once, exactly one counts.
//
// Identities are learned again at each examination (a new process, a
// failover, a flush: whatever sends the guard to examine). A node examined
// as another server gives up its claim, and the lowest node still
// answering as the old server owns it from then on. A node that stops
// answering keeps its claim: the other node's votes stay out until the
// configuration is mended, since the guard cannot tell a node down from a
// node gone. One window is left: a node whose connections reach two
// servers at once (a DNS change with old connections still open) may count
// a vote on the old server judged just before its examination moved its
// claim, in a round where the promoted node's vote also counts.
//
// A server that does not say its run_id (miniredis, or "?" in the marker)
// is not compared. Without the guard (Options.NoQuarantine) nothing here
// runs: Locker.Warm and Locker.Health compare the nodes' run_ids
// themselves.

// ErrDuplicateNode matches the vote of a node that answers as the same
// server as another node of the Locker: only one of them counts. It also
// matches New's and Warm's refusal of such a pair.
var ErrDuplicateNode = errors.New("redlock: duplicate node")

// DuplicateError is a vote, or a check, that found node Node answering as
// the same server as node Of, which counts instead.
type DuplicateError struct {
	Node, Of         int
	NodeName, OfName string
	// Server is the identity they share: the run_id (on a Redis Cluster,
	// "<run_id>@<node id>" of the master that answered).
	Server string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("%v: %s is the same server as %s (run_id %s), whose votes count instead", ErrDuplicateNode, e.NodeName, e.OfName, e.Server)
}

func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicateNode }

// Identities is what the guards of one Locker's nodes learned of the
// servers they answer as (see above). Nil: a Locker of one node, where
// nothing can be counted twice.
type Identities struct {
	names []string // the nodes' names, for errors
	mu    sync.Mutex
	by    map[string]*claim // by server identity
}

// NewIdentities returns the shared record of the nodes named names.
func NewIdentities(names []string) *Identities {
	return &Identities{names: names, by: map[string]*claim{}}
}

// claim is one server, and the node whose votes count for it.
type claim struct {
	ids     *Identities
	server  string
	owner   atomic.Int32
	counted atomic.Bool // a vote of the owner's has counted: no takeover
	holders map[int]int // node → its markers examined as this server; under ids.mu
}

// claim records that node was examined as server on one more marker, and
// returns the server's claim.
func (ids *Identities) claim(node int, server string) *claim {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	c := ids.by[server]
	if c == nil {
		c = &claim{ids: ids, server: server, holders: map[int]int{}}
		c.owner.Store(int32(node))
		ids.by[server] = c
	} else if owner := int(c.owner.Load()); node < owner && !c.counted.Load() {
		c.owner.Store(int32(node)) // the earlier node takes over: nothing counted yet
	}
	c.holders[node]++
	return c
}

// release records that node's marker is no longer examined as c's server.
// Where node owned it and holds it on no other marker, the lowest node
// still answering as it takes over.
func (c *claim) release(node int) {
	ids := c.ids
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if c.holders[node]--; c.holders[node] > 0 {
		return
	}
	delete(c.holders, node)
	if int(c.owner.Load()) != node {
		return
	}
	if len(c.holders) == 0 {
		delete(ids.by, c.server)
		return
	}
	next := -1
	for h := range c.holders {
		if next < 0 || h < next {
			next = h
		}
	}
	c.owner.Store(int32(next))
	c.counted.Store(false)
}

// duplicate is the error of node's vote where another node owns c's
// server; nil where node does.
func (c *claim) duplicate(node int) error {
	owner := int(c.owner.Load())
	if owner == node {
		return nil
	}
	return &DuplicateError{Node: node, Of: owner, NodeName: c.ids.names[node], OfName: c.ids.names[owner], Server: c.server}
}

// counts reports, as one step, whether node's vote for c's server counts,
// and records that it did: once it has, no other node takes the server
// over. It judges by the server's claim as it stands (c may have been
// given up since the vote's examination found it: a vote still judged by
// a forgotten claim must not count beside a node's that claimed the server
// afresh), and always under the lock: a lock-free read of the owner and
// the counted mark was fooled by a release and a new claim between the
// reads (counted set, cleared and set again by another node).
func (c *claim) counts(node int) error {
	ids := c.ids
	ids.mu.Lock()
	defer ids.mu.Unlock()
	cur := ids.by[c.server]
	if cur == nil {
		return fmt.Errorf("redlock: %s was examined as server %s, which no node answers as any more: its vote, judged by that examination, does not count", ids.names[node], c.server)
	}
	if err := cur.duplicate(node); err != nil {
		return err
	}
	cur.counted.Store(true)
	return nil
}

// claimFor records the server that the newest examination of marker found
// (its run_id, "?" where the server does not say), and returns its claim
// (nil: not compared). g.mu is held.
func (g *Guard) claimFor(marker, server string) *claim {
	if g.ids == nil {
		return nil
	}
	old := g.claimed[marker]
	if old != nil && old.server == server {
		return old
	}
	if old != nil {
		old.release(g.node)
		delete(g.claimed, marker)
	}
	if server == "" || server == "?" {
		return nil
	}
	c := g.ids.claim(g.node, server)
	g.claimed[marker] = c
	return c
}

// Duplicate is the error of this node's votes now where it answers, on any
// marker it examined, as a server another node owns; nil otherwise.
func (g *Guard) Duplicate() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.claimed {
		if err := c.duplicate(g.node); err != nil {
			return err
		}
	}
	return nil
}
