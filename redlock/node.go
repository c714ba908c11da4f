package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/redlock/internal/guard"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// Node is one independent Redis master. *redis.Client, *redis.ClusterClient,
// *redis.Ring and redis.UniversalClient all satisfy it (a Ring of one shard
// while the node guard is on: it watches one server). Each Node must be a
// separate failure domain: Redlock's majority means nothing if two Nodes are
// the same server, or a primary and its replica. Two Nodes that are one
// server are refused by New where their addresses say so, by Warm, and in
// every vote while the node guard is on (ErrDuplicateNode; see
// identity.go); a primary and its replica are not caught. A Node may itself be
// replicated: a Sentinel-backed redis.NewFailoverClient, or a Redis Cluster
// (see Options.WaitReplicas); one ClusterClient alone (N = 1) is a
// supported configuration.
//
// A go-redis hook on a Node's client may read a command's arguments but
// must not rewrite them in place: the nodes' pipelines share one copy of
// each command's arguments (a hook that needs other arguments makes a new
// command).
type Node interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// node is a Node with the name used in errors, its transport and its guard.
type node struct {
	Node
	index int
	name  string
	label uint64 // the low bits of the fencing tokens it owns (see labelNodes)
	// identity names the server alike in every process: its network and
	// address, or for a node that reports none its place in the list
	// (see labelNodes; Handle binds to it)
	identity string
	link     wire.Link // the node's transport: its auto-pipeline, or the direct transport
	// pipelined: link is a pipeline, which keeps order per key itself.
	pipelined bool
	guard     *guard.Guard // nil: Options.NoQuarantine
	stats     *nodeStats   // for Health
	watch     *nodeWatch   // what the Observer was told of the guard (nil: no Observer, or no guard)
	dials     *dialRecord  // the client's latest failed dial (nil: a Node that takes no hooks)
}

// newNodes checks the nodes passed to New: at least one, none nil, none
// twice, and gives each its guard and its transport, with w the WAIT that
// follows commands to replicate (nil: none; New checks that each node can
// carry it: checkWaitable). Unless o.NoAutoPipeline, each *redis.Client
// gets a pipeline.
func newNodes(nodes []Node, o *Options, w *wire.Wait) ([]node, error) {
	if len(nodes) == 0 {
		return nil, errors.New("redlock: no nodes")
	}
	out := make([]node, len(nodes))
	seen := make(map[any]int, len(nodes))
	identities := make([]string, len(nodes))
	declared := new(atomic.Int64) // the longest MaxTTL declared on any node (see guard.learn)
	names := make([]string, len(nodes))
	var servers *guard.Identities // which server each node answers as (see internal/guard/identity.go)
	if len(nodes) > 1 && !o.NoQuarantine {
		servers = guard.NewIdentities(names) // names are filled in below
	}
	for i, n := range nodes {
		if n == nil {
			return nil, fmt.Errorf("redlock: node %d is nil", i)
		}
		if v := reflect.ValueOf(n); v.Kind() == reflect.Pointer && v.IsNil() {
			return nil, fmt.Errorf("redlock: node %d is a nil %T", i, n)
		}
		name, addr, identity := describe(i, n)
		if j, dup := seen[identity]; dup {
			return nil, fmt.Errorf("%w: nodes %d and %d are the same server (%s; %s); each node must be independent", ErrDuplicateNode, j, i, names[j], name)
		}
		seen[identity] = i
		names[i] = name
		identities[i] = addr
		if addr == "" {
			identities[i] = fmt.Sprintf("~%06d", i) // after every address, in list order
		}
		out[i] = node{Node: n, index: i, name: name, stats: new(nodeStats), dials: dialRecordOf(n)}
		if !o.NoQuarantine {
			if r, ok := n.(*redis.Ring); ok && len(r.Options().Addrs) > 1 {
				// The guard's marker lives on one shard; a lock key on
				// another would go unguarded there.
				return nil, fmt.Errorf("redlock: node %d is a *redis.Ring of %d shards: the node guard cannot watch more than one server per node (give each shard as a node of its own, or set Options.NoQuarantine)", i, len(r.Options().Addrs))
			}
			_, cluster := n.(*redis.ClusterClient)
			out[i].guard = guard.New(guard.Config{MaxTTL: o.MaxTTL, WaitReplicas: o.WaitReplicas, Bound: o.bound(), Clock: o.Clock, Cluster: cluster, Declared: declared, Identities: servers, Node: i})
			if o.Observer != nil {
				out[i].watch = new(nodeWatch)
			}
		}
		var rider wire.Rider[guard.Companions] // a nil interface, not a nil *Guard, without the guard
		if out[i].guard != nil {
			rider = out[i].guard
		}
		if c, ok := n.(*redis.Client); ok && !o.NoAutoPipeline {
			out[i].link, out[i].pipelined = wire.NewPipeline(c, w, rider, wire.StallAfter(o.NodeTimeout), tripReporter(o.Observer, i, name, out[i].stats, true)), true
		} else {
			out[i].link = wire.NewDirect(n, w, rider, tripReporter(o.Observer, i, name, out[i].stats, false))
		}
	}
	labelNodes(out, identities)
	for i := range out {
		out[i].identity = identities[i]
	}
	return out, nil
}

// labelNodes gives each node the label that fencing tokens it owns carry in
// their low bits: its rank among the nodes' identities (their addresses),
// sorted. The order in which a process lists the nodes therefore does not
// matter: every process that names the same servers by the same addresses
// labels each server alike, which token uniqueness needs (see fencing.go).
// Nodes that report no address are ranked by their place in the list.
func labelNodes(nodes []node, identities []string) {
	byIdentity := make([]int, len(nodes))
	for i := range byIdentity {
		byIdentity[i] = i
	}
	slices.SortFunc(byIdentity, func(a, b int) int { return strings.Compare(identities[a], identities[b]) }) // distinct: New rejects duplicates
	for rank, i := range byIdentity {
		nodes[i].label = uint64(rank)
	}
}

// failoverAddr is the address go-redis gives a Sentinel-backed client
// (redis.NewFailoverClient): the primary it reaches changes with failovers,
// so such a node is known by its Node value, not an address.
const failoverAddr = "FailoverClient"

// describe names node i for errors, and returns the server's address where
// the client says ("" otherwise) and an identity that two Node values share
// when they reach the same server: the client's network and address, with
// the obvious aliases of one address resolved (sameServerAddr; databases
// of one server are one failure domain, so the database does not count),
// else the Node value itself. Two names New cannot tell apart are caught
// when the nodes answer (see identity.go).
func describe(i int, n Node) (name, addr string, identity any) {
	if c, ok := n.(interface{ Options() *redis.Options }); ok && c.Options().Addr != failoverAddr {
		o := c.Options()
		name = fmt.Sprintf("node %d (%s)", i, o.Addr)
		if o.DB != 0 {
			name = fmt.Sprintf("node %d (%s, db %d)", i, o.Addr, o.DB)
		}
		addr = o.Network + "|" + o.Addr
		return name, addr, sameServerAddr(o.Network, o.Addr)
	}
	name = "node " + strconv.Itoa(i)
	if reflect.TypeOf(n).Comparable() {
		return name, "", n
	}
	return name, "", name // not comparable: cannot tell, so treat as distinct
}

// acquireCommand is SET key value NX PX ms GET. GET makes the reply tell the
// cases apart (see readAcquire).
func acquireCommand(key, value string, ms int64) wire.Command {
	return wire.Command{Key: key, Args: []any{"SET", key, value, "NX", "PX", ms, "GET"}}.Of(value, wire.RoleSets).Replicated().GuardedBy()
}

// readAcquire reads acquireCommand's reply: nil means this call set the key;
// the old value equal to the lease's (b.value) means an earlier try of this very call (a
// client-library retry after a lost reply) set it, which is a grant too; any
// other value is contention.
func readAcquire(b *ballot, _ int, cmd *redis.Cmd) (Outcome, error) {
	old, err := cmd.Text()
	switch {
	case errors.Is(err, redis.Nil):
		return Granted, nil
	case err != nil:
		return Failed, err
	case old == b.value:
		return Granted, nil
	}
	return Taken, nil
}

// readScript reads the reply of the release, extend, check and fence
// scripts: 1 done, 0 the key is missing, -1 another value holds it, from a
// healing extension 2: the key was missing and is set again, and from an
// extension or check -2: an operator revoked the lease (Locker.Revoke).
func readScript(_ *ballot, _ int, cmd *redis.Cmd) (Outcome, error) {
	return scriptOutcome(cmd)
}

// readRelease reads a lease's release (Unlock): 2 is also a deletion,
// which named another Locker's turn in the key's line (see
// Locker.joinLine), counted in the ballot's passed.
func readRelease(b *ballot, _ int, cmd *redis.Cmd) (Outcome, error) {
	if code, err := cmd.Int64(); err == nil && code == 2 && b.passed != nil {
		b.passed.Add(1)
	}
	return scriptOutcome(cmd)
}

func scriptOutcome(cmd *redis.Cmd) (Outcome, error) {
	code, err := cmd.Int64()
	if err != nil {
		return Failed, err
	}
	switch code {
	case 1, 2:
		return Granted, nil
	case 0:
		return Missing, nil
	case -1:
		return Taken, nil
	case -2:
		return Revoked, nil
	}
	return Failed, fmt.Errorf("redlock: unexpected script reply %d", code)
}

// checkWaitable rejects, in New, a node on which the WAIT of
// Options.WaitReplicas or WaitAOF could not follow the command on its own
// connection.
func checkWaitable(n node) error {
	if wire.CanWait(n.Node) {
		return nil
	}
	return fmt.Errorf("redlock: %s is a %T: Options.WaitReplicas and WaitAOF need a *redis.Client or *redis.ClusterClient, whose WAIT can follow the command on its connection", n.name, n.Node)
}
