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
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one independent Redis master. *redis.Client, *redis.ClusterClient,
// *redis.Ring and redis.UniversalClient all satisfy it (a Ring of one shard
// while the node guard is on: it watches one server). Each Node must be a
// separate failure domain: Redlock's majority means nothing if two Nodes are
// the same server, or a primary and its replica. A Node may itself be
// replicated: a Sentinel-backed redis.NewFailoverClient, or a Redis Cluster
// (see Options.WaitReplicas); one ClusterClient alone (N = 1) is a
// supported configuration.
type Node interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
}

var (
	//go:embed scripts/release.lua
	releaseLua    string
	releaseScript = newScript("release", "GET, DEL", releaseLua)

	//go:embed scripts/extend.lua
	extendLua    string
	extendScript = newScript("extend", "GET, PEXPIRE, SET", extendLua)

	//go:embed scripts/check.lua
	checkLua    string
	checkScript = newScript("check", "GET", checkLua)

	//go:embed scripts/acquire_fenced.lua
	acquireFencedLua    string
	acquireFencedScript = newScript("fenced acquire", "GET, SET, INCR", acquireFencedLua)

	//go:embed scripts/fence.lua
	fenceLua    string
	fenceScript = newScript("fence", "GET, SET", fenceLua)
)

// script is a Lua script with its source, which a pipeline resends in full
// when a node answers EVALSHA with NOSCRIPT, and what an error says of it.
type script struct {
	*redis.Script
	src   string
	name  string // as errors name it: "the release script"
	calls string // the commands it calls, which the node's ACL must allow
}

func newScript(name, calls, src string) *script {
	return &script{Script: redis.NewScript(src), src: src, name: name, calls: calls}
}

// node is a Node with the name used in errors.
type node struct {
	Node
	index   int
	name    string
	label   uint64        // the low bits of the fencing tokens it owns (see labelNodes)
	pipe    *pipeline     // the node's auto-pipeline; nil: a goroutine and pooled connection per call
	sending *atomic.Int32 // calls sent and not yet returned, without pipe
	guard   *guard        // nil: Options.NoQuarantine
	stats   *nodeStats    // for Health
	outside *outsiders    // a Redis Cluster node's clients of masters its ClusterClient does not offer (see cluster.go); nil elsewhere
}

// maxSending bounds the calls one Locker has outstanding on one node that has
// no pipeline (a pipeline bounds its own queue). A node
// that stops answering would otherwise collect a goroutine (and a pooled
// connection, or a place in the pool's queue) for every call made to it,
// until the client library's timeouts free them; past the bound, calls to it
// fail at once. Releases refused this way leave that node's key to expire.
const maxSending = 128

var errNodeBusy = errors.New("redlock: too many calls outstanding on the node (it is not answering)")

// errNodeTimeout is the error of a call that ran out of its own time
// (NodeTimeout, or a release's TTL). It deliberately does not match
// context.DeadlineExceeded, which callers read as their own deadline.
var errNodeTimeout = errors.New("redlock: no reply from the node in time")

func nodeTimeout(d time.Duration, err error) error {
	return fmt.Errorf("%w (%v): %v", errNodeTimeout, d, err)
}

func (n node) admit() bool {
	if n.sending.Add(1) > maxSending {
		n.sending.Add(-1)
		return false
	}
	return true
}

// newNodes checks the nodes passed to New: at least one, none nil, none twice.
// Unless o.NoAutoPipeline, each *redis.Client gets a pipeline.
func newNodes(nodes []Node, o *Options) ([]node, error) {
	if len(nodes) == 0 {
		return nil, errors.New("redlock: no nodes")
	}
	out := make([]node, len(nodes))
	seen := make(map[any]int, len(nodes))
	identities := make([]string, len(nodes))
	declared := new(atomic.Int64) // the longest MaxTTL declared on any node (see guard.learn)
	for i, n := range nodes {
		if n == nil {
			return nil, fmt.Errorf("redlock: node %d is nil", i)
		}
		if v := reflect.ValueOf(n); v.Kind() == reflect.Pointer && v.IsNil() {
			return nil, fmt.Errorf("redlock: node %d is a nil %T", i, n)
		}
		name, addr, identity := describe(i, n)
		if j, dup := seen[identity]; dup {
			return nil, fmt.Errorf("redlock: nodes %d and %d are the same server (%s); each node must be independent", j, i, name)
		}
		seen[identity] = i
		identities[i] = addr
		if addr == "" {
			identities[i] = fmt.Sprintf("~%06d", i) // after every address, in list order
		}
		out[i] = node{Node: n, index: i, name: name, sending: new(atomic.Int32), stats: new(nodeStats)}
		if _, ok := n.(*redis.ClusterClient); ok {
			out[i].outside = new(outsiders)
		}
		if !o.NoQuarantine {
			if r, ok := n.(*redis.Ring); ok && len(r.Options().Addrs) > 1 {
				// The guard's marker lives on one shard; a lock key on
				// another would go unguarded there.
				return nil, fmt.Errorf("redlock: node %d is a *redis.Ring of %d shards: the node guard cannot watch more than one server per node (give each shard as a node of its own, or set Options.NoQuarantine)", i, len(r.Options().Addrs))
			}
			_, cluster := n.(*redis.ClusterClient)
			out[i].guard = newGuard(o, cluster, declared)
		}
		if c, ok := n.(*redis.Client); ok && !o.NoAutoPipeline {
			out[i].pipe = &pipeline{client: c, stallAfter: stallAfter(o.NodeTimeout), guard: out[i].guard}
		}
	}
	labelNodes(out, identities)
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
// when they reach the same server: the client's network and address
// (databases of one server are one failure domain, so the database does not
// count), else the Node value itself.
func describe(i int, n Node) (name, addr string, identity any) {
	if c, ok := n.(interface{ Options() *redis.Options }); ok && c.Options().Addr != failoverAddr {
		o := c.Options()
		name = fmt.Sprintf("node %d (%s)", i, o.Addr)
		if o.DB != 0 {
			name = fmt.Sprintf("node %d (%s, db %d)", i, o.Addr, o.DB)
		}
		addr = o.Network + "|" + o.Addr
		return name, addr, addr
	}
	name = "node " + strconv.Itoa(i)
	if reflect.TypeOf(n).Comparable() {
		return name, "", n
	}
	return name, "", name // not comparable: cannot tell, so treat as distinct
}

// command is what a round sends to each node: a plain command, or a script
// with its keys and arguments.
type command struct {
	key    string // the first key, whose order a pipeline keeps
	args   []any
	script *script
	keys   []string
	argv   []any
	lease  string // the value of the lease it acts for, where it matters (see role)
	role   role
	// replicate: a grant counts only once WAIT (Options.WaitReplicas)
	// acknowledged it. Acquisitions, extensions and fencing phase 2.
	replicate bool
	// guarded: the node guard's verdict decides whether its vote counts
	// (see guard.go). Acquisitions, extensions and checks.
	guarded bool
}

// role tells a pipeline which commands of one lease may be withdrawn before
// they are sent (see pipeline.withdraw).
type role uint8

const (
	roleOther    role = iota
	roleSets          // puts the lease's value on the node (an acquisition)
	roleFences        // fencing phase 2, which follows roleSets
	roleReleases      // deletes the lease's value
	roleExtends       // extends the lease, and may set its value again (healing)
)

func scriptCommand(s *script, keys []string, argv ...any) command {
	return command{key: keys[0], script: s, keys: keys, argv: argv}
}

// of marks c as acting for the lease with value, in role r.
func (c command) of(value string, r role) command {
	c.lease, c.role = value, r
	return c
}

// replicated marks c as a write whose grant must be replicated.
func (c command) replicated() command {
	c.replicate = true
	return c
}

// guardedBy marks c as a command whose vote the node guard judges.
func (c command) guardedBy() command {
	c.guarded = true
	return c
}

// wire is the command as a pipeline sends it: a script goes as EVALSHA.
// Every node's command shares the slice, which nothing writes.
func (c command) wire() []any {
	if c.script == nil {
		return c.args
	}
	a := make([]any, 0, 3+len(c.keys)+len(c.argv))
	a = append(a, "evalsha", c.script.Hash(), len(c.keys))
	for _, k := range c.keys {
		a = append(a, k)
	}
	return append(a, c.argv...)
}

// source is the script's source, or "" for a plain command.
func (c command) source() string {
	if c.script == nil {
		return ""
	}
	return c.script.src
}

// send sends c on the node's client (not its pipeline). A script goes as
// EVALSHA, then EVAL on NOSCRIPT.
func (n node) send(ctx context.Context, c command) *redis.Cmd {
	if c.script != nil {
		return c.script.Run(ctx, n.Node, c.keys, c.argv...)
	}
	return n.Do(ctx, c.args...)
}

// reader reads node i's reply to a round's command.
type reader func(i int, cmd *redis.Cmd) (Outcome, error)

// acquireCommand is SET key value NX PX ms GET. GET makes the reply tell the
// cases apart (see readAcquire).
func acquireCommand(key, value string, ms int64) command {
	return command{key: key, args: []any{"SET", key, value, "NX", "PX", ms, "GET"}}.of(value, roleSets).replicated().guardedBy()
}

// readAcquire reads acquireCommand's reply: nil means this call set the key;
// the old value equal to ours means an earlier try of this very call (a
// client-library retry after a lost reply) set it, which is a grant too; any
// other value is contention.
func readAcquire(value string) reader {
	return func(_ int, cmd *redis.Cmd) (Outcome, error) {
		old, err := cmd.Text()
		switch {
		case errors.Is(err, redis.Nil):
			return Granted, nil
		case err != nil:
			return Failed, err
		case old == value:
			return Granted, nil
		}
		return Taken, nil
	}
}

// readScript reads the reply of the release, extend, check and fence
// scripts: 1 done, 0 the key is missing, -1 another value holds it, and
// from a healing extension 2: the key was missing and is set again.
func readScript(_ int, cmd *redis.Cmd) (Outcome, error) {
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
	}
	return Failed, fmt.Errorf("redlock: unexpected script reply %d", code)
}
