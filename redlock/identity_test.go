package redlock_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock"
)

// runIDOf is the run_id the tests give the miniredis server of node i.
func runIDOf(i int) string { return fmt.Sprintf("%040x", i+1) }

// sayRunID makes m answer INFO server with run, as a Redis server names its
// process (miniredis has no INFO): to the node guard, Warm and Health, a
// server they can tell from another.
func sayRunID(m *miniredis.Miniredis, run string) {
	m.Server().SetPreHook(func(p *server.Peer, cmd string, args ...string) bool {
		if strings.EqualFold(cmd, "info") && len(args) == 1 && strings.EqualFold(args[0], "server") {
			p.WriteBulk("# Server\r\nrun_id:" + run + "\r\n")
			return true
		}
		return false
	})
}

// otherName is a Node that hides its client's address from New, as a Ring,
// a wrapper or a second DNS name of one host does.
type otherName struct{ redlock.Node }

// oneServerTwice is three miniredis servers that say their run_ids, and
// the nodes of a Locker that is given server 0 twice: node 0 as
// "127.0.0.1:P", node 1 as "localhost:P" behind a wrapper (New cannot see
// its address), node 2 as server 1.
func oneServerTwice(t *testing.T) (*cluster, []redlock.Node) {
	t.Helper()
	c := newCluster(t, 2)
	for i, m := range c.servers {
		sayRunID(m, runIDOf(i))
	}
	_, port, err := net.SplitHostPort(c.servers[0].Addr())
	require.NoError(t, err)
	alias := otherName{newClient(t, net.JoinHostPort("localhost", port))}
	return c, []redlock.Node{c.clients[0], alias, c.clients[1]}
}

// The double grant that one server under two names causes, and the node
// guard that closes it. Server 1 (node 2, the only independent node) holds
// k for someone else; nodes 0 and 1 are server 0. The guard learns that
// both answer as one run_id and counts node 0 alone: the acquisition fails
// with ErrDuplicateNode naming both, in the *QuorumError and in the
// Observer's event. The negative control, NoQuarantine (no guard, and no
// Warm), must see the double grant.
func TestDuplicateNodeVotesOnce(t *testing.T) {
	onEachTransport(t, func(t *testing.T, opts *redlock.Options) {
		for _, guarded := range []bool{true, false} {
			t.Run(map[bool]string{true: "guarded", false: "NoQuarantine"}[guarded], func(t *testing.T) {
				ctx := t.Context()
				c, nodes := oneServerTwice(t)
				events := new(recorder)
				o := *opts
				o.NoQuarantine, o.Observer = !guarded, events
				l := newLocker(t, nodes, &o)
				if guarded {
					require.NoError(t, l.TrustNodes(ctx), "memory whole: no quarantine in the way")
				}
				c.setOther(t, "k", 1)

				lease, err := l.TryLock(ctx, "k", 10*time.Second)
				drain(t, l)
				if !guarded {
					require.NoError(t, err, "the negative control: server 0 wins twice")
					assert.Equal(t, []int{1}, c.holding("k", "someone-else"), "while another holds k on the only independent node: a double grant")
					// Its release, too, deletes the key on server 0 once
					// and then finds it missing there.
					require.ErrorIs(t, lease.Unlock(ctx), redlock.ErrNotHeld)
					return
				}
				require.ErrorIs(t, err, redlock.ErrDuplicateNode)
				assert.NotErrorIs(t, err, redlock.ErrNodeQuarantined)
				var q *redlock.QuorumError
				require.ErrorAs(t, err, &q)
				assert.LessOrEqual(t, q.Granted, 1, "node 0 alone")
				// The round may be decided before node 0 answers.
				assert.Contains(t, []redlock.Outcome{redlock.Granted, redlock.Unanswered}, q.Nodes[0].Outcome)
				assert.Equal(t, redlock.Taken, q.Nodes[2].Outcome)
				require.ErrorIs(t, q.Nodes[1].Err, redlock.ErrDuplicateNode)
				requireNamesBoth(t, q.Nodes[1].Err, nodes)
				assert.Equal(t, []int{1}, c.holding("k", "someone-else"))

				var acquire *redlock.Event
				for _, e := range events.of(redlock.OpAcquire) {
					if e.Key == "k" {
						acquire = &e
					}
				}
				require.NotNil(t, acquire, "the acquisition's event")
				require.Len(t, acquire.Nodes, 3)
				require.ErrorIs(t, acquire.Nodes[1].Err, redlock.ErrDuplicateNode, "the event carries node 1's vote")
			})
		}
	})
}

// requireNamesBoth checks that err names node 1 and node 0 by their
// addresses (nodes as oneServerTwice gives them).
func requireNamesBoth(t *testing.T, err error, nodes []redlock.Node) {
	t.Helper()
	addr := nodes[0].(*redis.Client).Options().Addr
	assert.ErrorContains(t, err, "node 0 ("+addr+")")
	assert.ErrorContains(t, err, "node 1")
	assert.ErrorContains(t, err, runIDOf(0))
}

// Warm asks every node which server answers, with the guard and without:
// of the pair, the later fails with ErrDuplicateNode naming both.
func TestWarmRefusesOneServerUnderTwoNames(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		t.Run(map[bool]string{true: "guarded", false: "NoQuarantine"}[guarded], func(t *testing.T) {
			_, nodes := oneServerTwice(t)
			l := newLocker(t, nodes, &redlock.Options{NoQuarantine: !guarded})
			err := l.Warm(t.Context())
			require.ErrorIs(t, err, redlock.ErrDuplicateNode)
			var w *redlock.WarmError
			require.ErrorAs(t, err, &w)
			assert.NoError(t, w.Nodes[0].Err)
			assert.NoError(t, w.Nodes[2].Err)
			assert.Equal(t, redlock.Failed, w.Nodes[1].Outcome)
			requireNamesBoth(t, w.Nodes[1].Err, nodes)
		})
	}
}

// Warm of independent servers that say their run_ids passes.
func TestWarmPassesIndependentServers(t *testing.T) {
	c := newCluster(t, 3)
	for i, m := range c.servers {
		sayRunID(m, runIDOf(i))
	}
	l := newLocker(t, c.nodes(nil), nil)
	require.NoError(t, l.Warm(t.Context()))
	for _, h := range l.Health() {
		assert.NoError(t, h.Duplicate, h.Name)
	}
}

// Health names the node whose votes do not count: as the guard decided,
// and with NoQuarantine as the run_ids say now.
func TestHealthNamesTheDuplicateNode(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		t.Run(map[bool]string{true: "guarded", false: "NoQuarantine"}[guarded], func(t *testing.T) {
			_, nodes := oneServerTwice(t)
			l := newLocker(t, nodes, &redlock.Options{NoQuarantine: !guarded})
			_ = l.Warm(t.Context()) // the guard examines every node
			h := l.Health()
			assert.NoError(t, h[0].Duplicate)
			assert.NoError(t, h[2].Duplicate)
			require.ErrorIs(t, h[1].Duplicate, redlock.ErrDuplicateNode)
			requireNamesBoth(t, h[1].Duplicate, nodes)
		})
	}
}

// New refuses two clients of one address under its obvious aliases, and
// names both; it cannot tell two addresses of one host apart without the
// network, and accepts them.
func TestNewRefusesAliasesOfOneAddress(t *testing.T) {
	c := newCluster(t, 1)
	_, port, err := net.SplitHostPort(c.servers[0].Addr())
	require.NoError(t, err)
	at := func(host string) string { return net.JoinHostPort(host, port) }
	for _, tt := range []struct{ a, b string }{
		{at("127.0.0.1"), at("localhost")},
		{at("LocalHost."), at("127.0.0.1")},
		{at("::ffff:127.0.0.1"), at("127.0.0.1")},
		{at("::1"), at("0:0:0:0:0:0:0:1")},
		{at("Redis.Example"), at("redis.example.")},
	} {
		t.Run(tt.a+" and "+tt.b, func(t *testing.T) {
			_, err := redlock.New([]redlock.Node{newClient(t, tt.a), newClient(t, tt.b)}, nil)
			require.ErrorIs(t, err, redlock.ErrDuplicateNode)
			assert.ErrorContains(t, err, "node 0 ("+tt.a+")")
			assert.ErrorContains(t, err, "node 1 ("+tt.b+")")
		})
	}
	for _, tt := range []struct{ a, b string }{
		{at("127.0.0.1"), at("127.0.0.2")},
		{at("127.0.0.1"), at("::1")},
		{at("redis-a.example"), at("redis-b.example")},
	} {
		t.Run(tt.a+" and "+tt.b+" accepted", func(t *testing.T) {
			l, err := redlock.New([]redlock.Node{newClient(t, tt.a), newClient(t, tt.b)}, nil)
			require.NoError(t, err)
			require.NotNil(t, l)
		})
	}
}

// A node whose name comes to reach another server gives up its claim at
// its next examination, and the other node of the pair counts from then
// on: identities are learned again, not fixed at the first look.
func TestDuplicateNodeCountsOnceItsPairMovesAway(t *testing.T) {
	ctx := t.Context()
	_, nodes := oneServerTwice(t)
	moved := &switchable{}
	moved.to(nodes[0])
	nodes[0] = moved
	events := new(recorder)
	l := newLocker(t, nodes, &redlock.Options{Observer: events})
	require.NoError(t, l.TrustNodes(ctx))
	require.ErrorIs(t, l.Health()[1].Duplicate, redlock.ErrDuplicateNode)

	other := redistest.Miniredis(t)
	sayRunID(other, runIDOf(7))
	require.NoError(t, other.Set("redlock:memory", "0 "+runIDOf(7)), "trusted, for the run_id it says")
	moved.to(newClient(t, other.Addr()))
	// The first round after the move examines node 0 there; node 1's vote
	// in it may have been judged before.
	if lease, err := l.TryLock(ctx, "during", 10*time.Second); err == nil {
		require.NoError(t, lease.Unlock(ctx))
	}
	drain(t, l)
	for _, h := range l.Health() {
		assert.NoError(t, h.Duplicate, h.Name)
	}

	events.reset()
	lease, err := l.TryLock(ctx, "after", 10*time.Second)
	require.NoError(t, err)
	drain(t, l)
	e := events.one(t, redlock.OpAcquire)
	for _, n := range e.Nodes {
		assert.Contains(t, []redlock.Outcome{redlock.Granted, redlock.Unanswered}, n.Outcome, "%s: %v", n.Name, n.Err)
		assert.NoError(t, n.Err, n.Name)
	}
	require.NoError(t, lease.Unlock(ctx))
}

// switchable is a Node whose server a test can change: a name that comes
// to reach another server (a DNS change, a failover).
type switchable struct{ n atomic.Pointer[redlock.Node] }

func (s *switchable) to(n redlock.Node)  { s.n.Store(&n) }
func (s *switchable) node() redlock.Node { return *s.n.Load() }

func (s *switchable) Do(ctx context.Context, args ...any) *redis.Cmd {
	return s.node().Do(ctx, args...)
}

func (s *switchable) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.node().Eval(ctx, script, keys, args...)
}

func (s *switchable) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.node().EvalSha(ctx, sha1, keys, args...)
}

func (s *switchable) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.node().EvalRO(ctx, script, keys, args...)
}

func (s *switchable) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.node().EvalShaRO(ctx, sha1, keys, args...)
}

func (s *switchable) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return s.node().ScriptExists(ctx, hashes...)
}

func (s *switchable) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return s.node().ScriptLoad(ctx, script)
}
