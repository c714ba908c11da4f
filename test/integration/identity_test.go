package integration

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/redlock/redlock/test/integration/procs"
)

// One redis-server process under two names, as two DNS names of one host
// give it: it listens on 127.0.0.1 and 127.0.0.2, and the Locker's nodes 0
// and 1 dial one address each, which New cannot tell apart. Node 2 is a
// second, independent process.

// twoNames is a server reached as node 0 and node 1, and an independent
// server as node 2.
type twoNames struct {
	server, other *procs.Proc
	addrs         [3]string
}

func startTwoNames(t *testing.T) *twoNames {
	t.Helper()
	bin := procs.Binary(t, harness.SuiteServer(), "server")
	port, err := procs.FreePort()
	require.NoError(t, err)
	s := procs.Start(t, "one server, two names", bin, port, "--bind", "127.0.0.1", "127.0.0.2", "--save", "", "--appendonly", "no")
	otherPort, err := procs.FreePort()
	require.NoError(t, err)
	o := procs.Start(t, "independent server", bin, otherPort, "--save", "", "--appendonly", "no")
	return &twoNames{server: s, other: o, addrs: [3]string{s.Addr, "127.0.0.2:" + strconv.Itoa(port), o.Addr}}
}

// nodes are clients of the three addresses, closed when the test ends.
func (s *twoNames) nodes(t *testing.T) []redlock.Node {
	out := make([]redlock.Node, len(s.addrs))
	for i, a := range s.addrs {
		out[i] = closing(t, redis.NewClient(clientOptions(a)))
	}
	return out
}

// identityLocker is a Locker on nodes with opts, drained when the test ends.
func identityLocker(t *testing.T, nodes []redlock.Node, opts *redlock.Options) *redlock.Locker {
	t.Helper()
	l, err := redlock.New(nodes, opts)
	require.NoError(t, err, "New cannot tell the two names apart")
	t.Cleanup(func() { _ = l.Drain(context.WithoutCancel(t.Context())) })
	return l
}

// requireNamesBoth checks that err is ErrDuplicateNode naming the
// addresses of nodes 0 and 1.
func (s *twoNames) requireNamesBoth(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, redlock.ErrDuplicateNode)
	assert.ErrorContains(t, err, "node 0 ("+s.addrs[0]+")")
	assert.ErrorContains(t, err, "node 1 ("+s.addrs[1]+")")
}

// TestOneServerUnderTwoNamesVotesOnce: the independent node holds k for
// someone else. With the node guard, the server's two names vote once: the
// acquisition fails, its *QuorumError naming node 1's vote ErrDuplicateNode
// with both addresses. The negative control, NoQuarantine (no guard, no
// Warm), is granted k by the one server twice while the other holder has
// it: a double grant.
func TestOneServerUnderTwoNamesVotesOnce(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(transportName(direct), func(t *testing.T) {
			for _, guarded := range []bool{true, false} {
				t.Run(map[bool]string{true: "guarded", false: "NoQuarantine control"}[guarded], func(t *testing.T) {
					ctx := t.Context()
					const key = "it:identity"
					s := startTwoNames(t)
					l := identityLocker(t, s.nodes(t), &redlock.Options{NodeTimeout: 2 * time.Second, NoAutoPipeline: direct, NoQuarantine: !guarded})
					if guarded {
						require.NoError(t, l.TrustNodes(ctx), "new servers: no quarantine in the way")
					}
					require.NoError(t, s.other.Client.Set(ctx, key, "someone-else", time.Minute).Err())

					lease, err := l.TryLock(ctx, key, 10*time.Second)
					drain(t, l)
					held, gerr := s.other.Client.Get(ctx, key).Result()
					require.NoError(t, gerr)
					require.Equal(t, "someone-else", held, "the independent node's holder")
					if !guarded {
						require.NoError(t, err, "the negative control: one server wins twice")
						mine, gerr := s.server.Client.Get(ctx, key).Result()
						require.NoError(t, gerr)
						require.Equal(t, lease.Value(), mine, "granted on the one server, while someone else holds k: a double grant")
						return
					}
					require.Error(t, err)
					require.Nil(t, lease)
					var q *redlock.QuorumError
					require.ErrorAs(t, err, &q)
					assert.LessOrEqual(t, q.Granted, 1)
					s.requireNamesBoth(t, q.Nodes[1].Err)
					assert.NoError(t, q.Nodes[0].Err)
					assert.Equal(t, redlock.Taken, q.Nodes[2].Outcome)
					t.Logf("the acquisition: %v", err)
				})
			}
		})
	}
}

// TestWarmAndHealthNameOneServerUnderTwoNames: Warm fails node 1 with
// ErrDuplicateNode naming both addresses, with the guard and without it;
// Health says the same of node 1, and nothing of nodes 0 and 2.
func TestWarmAndHealthNameOneServerUnderTwoNames(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		t.Run(map[bool]string{true: "guarded", false: "NoQuarantine"}[guarded], func(t *testing.T) {
			s := startTwoNames(t)
			l := identityLocker(t, s.nodes(t), &redlock.Options{NodeTimeout: 2 * time.Second, NoQuarantine: !guarded})
			err := l.Warm(t.Context())
			var w *redlock.WarmError
			require.ErrorAs(t, err, &w)
			assert.NoError(t, w.Nodes[0].Err)
			assert.NoError(t, w.Nodes[2].Err)
			s.requireNamesBoth(t, w.Nodes[1].Err)

			h := l.Health()
			assert.NoError(t, h[0].Duplicate)
			assert.NoError(t, h[2].Duplicate)
			s.requireNamesBoth(t, h[1].Duplicate)
		})
	}
}

// TestOneClusterTwiceVotesOnce: two ClusterClients of one Redis Cluster
// are one set of servers. Warm fails the second, naming every master's
// run_id it shares; and with the node guard, a key's slot answers through
// one master for both, so that one of them votes: the acquisition of a key
// the independent node holds for someone else fails with ErrDuplicateNode.
func TestOneClusterTwiceVotesOnce(t *testing.T) {
	ctx := t.Context()
	const key = "it:identity-cluster"
	c := procs.StartCluster(t, harness.SuiteServer(), 3, 0)
	bin := procs.Binary(t, harness.SuiteServer(), "server")
	port, err := procs.FreePort()
	require.NoError(t, err)
	other := procs.Start(t, "independent server", bin, port, "--save", "", "--appendonly", "no")
	nodes := []redlock.Node{c.Client(t), c.Client(t), closing(t, redis.NewClient(clientOptions(other.Addr)))}
	l := identityLocker(t, nodes, &redlock.Options{NodeTimeout: 2 * time.Second})

	err = l.Warm(ctx)
	var w *redlock.WarmError
	require.ErrorAs(t, err, &w)
	assert.NoError(t, w.Nodes[0].Err)
	assert.NoError(t, w.Nodes[2].Err)
	require.ErrorIs(t, w.Nodes[1].Err, redlock.ErrDuplicateNode)

	require.NoError(t, l.TrustNodes(ctx))
	require.NoError(t, other.Client.Set(ctx, key, "someone-else", time.Minute).Err())
	_, err = l.TryLock(ctx, key, 10*time.Second)
	drain(t, l)
	requireOneOfTwoVotes(t, err)
}

// requireOneOfTwoVotes checks that err, an acquisition's, failed nodes 0
// or 1 (two clients of one server) with ErrDuplicateNode, exactly one.
func requireOneOfTwoVotes(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, redlock.ErrDuplicateNode)
	var q *redlock.QuorumError
	require.ErrorAs(t, err, &q)
	dups := 0
	for _, n := range q.Nodes[:2] {
		if errors.Is(n.Err, redlock.ErrDuplicateNode) {
			dups++
		}
	}
	assert.Equal(t, 1, dups, "exactly one of the two clients votes: %v", err)
}

// TestOneSentinelPrimaryTwiceVotesOnce: two failover clients of one
// Sentinel master name reach one primary, the identity of the primary that
// answers. With the node guard the key's acquisition, with the third node
// holding it for someone else, fails with ErrDuplicateNode on one of them,
// before and after a failover (the promoted replica is one server to both
// clients again). The negative control, NoQuarantine, is granted the key by
// the one primary twice while the third node's holder has it.
func TestOneSentinelPrimaryTwiceVotesOnce(t *testing.T) {
	ctx := t.Context()
	const key = "it:identity-sentinel"
	s := startSentinelNodes(t)
	clients := s.clients(t)
	twice := s.clients(t)
	nodes := []redlock.Node{clients[0], twice[0], clients[2]}
	held := func() {
		t.Helper()
		primary, err := s.sentinel.Client.Do(ctx, "SENTINEL", "get-master-addr-by-name", s.masters[2]).StringSlice()
		require.NoError(t, err)
		require.NoError(t, closing(t, redis.NewClient(clientOptions(primary[0]+":"+primary[1]))).Set(ctx, key, "someone-else", time.Minute).Err())
	}
	held()

	control := identityLocker(t, nodes, &redlock.Options{NodeTimeout: 2 * time.Second, NoQuarantine: true})
	lease, err := control.TryLock(ctx, key, 10*time.Second)
	require.NoError(t, err, "the negative control: one primary wins twice while node 2's holder has the key")
	// Released through the first client, the key is gone for the second.
	require.ErrorIs(t, lease.Unlock(ctx), redlock.ErrNotHeld)
	drain(t, control)

	l := identityLocker(t, nodes, &redlock.Options{NodeTimeout: 2 * time.Second})
	require.NoError(t, l.TrustNodes(ctx))
	_, err = l.TryLock(ctx, key, 10*time.Second)
	drain(t, l)
	requireOneOfTwoVotes(t, err)

	s.failOver(t, 0)
	// The promoted replica is quarantined (its history was not waited
	// for): trust it, as an operator who knows it holds no locks would.
	require.NoError(t, l.TrustNodes(ctx))
	_, err = l.TryLock(ctx, key, 10*time.Second)
	drain(t, l)
	requireOneOfTwoVotes(t, err)
}
