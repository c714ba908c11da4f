package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Node is one independent Redis master. *redis.Client, *redis.ClusterClient,
// *redis.Ring and redis.UniversalClient all satisfy it. Each Node must be a
// separate failure domain: Redlock's majority means nothing if two Nodes are
// the same server, or a primary and its replica.
type Node interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
}

var (
	//go:embed scripts/release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed scripts/extend.lua
	extendLua    string
	extendScript = redis.NewScript(extendLua)

	//go:embed scripts/check.lua
	checkLua    string
	checkScript = redis.NewScript(checkLua)

	//go:embed scripts/acquire_fenced.lua
	acquireFencedLua    string
	acquireFencedScript = redis.NewScript(acquireFencedLua)

	//go:embed scripts/fence.lua
	fenceLua    string
	fenceScript = redis.NewScript(fenceLua)
)

// node is a Node with the name used in errors.
type node struct {
	Node
	index   int
	name    string
	sending *atomic.Int32 // calls sent and not yet returned
}

// maxSending bounds the calls one Locker has outstanding on one node. A node
// that stops answering would otherwise collect a goroutine (and a pooled
// connection, or a place in the pool's queue) for every call made to it,
// until the client library's timeouts free them; past the bound, calls to it
// fail at once. Releases refused this way leave that node's key to expire.
const maxSending = 128

var errNodeBusy = errors.New("redlock: too many calls outstanding on the node (it is not answering)")

func (n node) admit() bool {
	if n.sending.Add(1) > maxSending {
		n.sending.Add(-1)
		return false
	}
	return true
}

// newNodes checks the nodes passed to New: at least one, none nil, none twice.
func newNodes(nodes []Node) ([]node, error) {
	if len(nodes) == 0 {
		return nil, errors.New("redlock: no nodes")
	}
	out := make([]node, len(nodes))
	seen := make(map[any]int, len(nodes))
	for i, n := range nodes {
		if n == nil {
			return nil, fmt.Errorf("redlock: node %d is nil", i)
		}
		if v := reflect.ValueOf(n); v.Kind() == reflect.Pointer && v.IsNil() {
			return nil, fmt.Errorf("redlock: node %d is a nil %T", i, n)
		}
		name, identity := describe(i, n)
		if j, dup := seen[identity]; dup {
			return nil, fmt.Errorf("redlock: nodes %d and %d are the same server (%s); each node must be independent", j, i, name)
		}
		seen[identity] = i
		out[i] = node{Node: n, index: i, name: name, sending: new(atomic.Int32)}
	}
	return out, nil
}

// describe names node i for errors, and returns an identity that two
// Node values share when they reach the same server: the client's address
// and database where the client says, else the Node value itself.
func describe(i int, n Node) (name string, identity any) {
	if c, ok := n.(interface{ Options() *redis.Options }); ok {
		o := c.Options()
		return fmt.Sprintf("node %d (%s)", i, o.Addr), fmt.Sprintf("%s|%s|%d", o.Network, o.Addr, o.DB)
	}
	name = "node " + strconv.Itoa(i)
	if reflect.TypeOf(n).Comparable() {
		return name, n
	}
	return name, name // not comparable: cannot tell, so treat as distinct
}

// reply codes of the release, extend and check scripts.
func outcomeOf(code int64) Outcome {
	switch code {
	case 1:
		return Granted
	case 0:
		return Missing
	case -1:
		return Taken
	}
	return Failed
}

// acquire sends SET key value NX PX ms GET. GET makes the reply tell the
// cases apart: nil means this call set the key; the old value equal to ours
// means an earlier try of this very call (a client-library retry after a
// lost reply) set it, which is a grant too; any other value is contention.
func (n node) acquire(ctx context.Context, key, value string, ms int64) (Outcome, error) {
	old, err := n.Do(ctx, "SET", key, value, "NX", "PX", ms, "GET").Text()
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

// run runs one of the compare-and-act scripts (EVALSHA, EVAL on NOSCRIPT).
func (n node) run(ctx context.Context, s *redis.Script, keys []string, args ...any) (Outcome, error) {
	code, err := s.Run(ctx, n.Node, keys, args...).Int64()
	if err != nil {
		return Failed, err
	}
	if o := outcomeOf(code); o != Failed {
		return o, nil
	}
	return Failed, fmt.Errorf("redlock: unexpected script reply %d", code)
}
