package redlock_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/fakeredis"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
)

// memNet is a synctest bubble's nodes: go-redis clients dialing fakeredis
// over net.Pipe (an uncontended node: every SET grants, every script
// answers 1), whose replies the test can hold back. A stall holds every
// node's replies until a moment: to the client that is the same as its
// own stall (scheduling, GC), in which every reply waits unread. A frozen
// node's replies are never read until the test ends.
type memNet struct {
	mu     sync.Mutex
	until  time.Time     // no reply is read before it
	frozen map[int]bool  // nodes whose replies are not read
	thaw   chan struct{} // closed when the test ends: frozen reads return
}

// stallFor holds every node's replies until d from now.
func (m *memNet) stallFor(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.until = time.Now().Add(d)
}

// freeze stops node i's replies from being read.
func (m *memNet) freeze(i int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.frozen[i] = true
}

// memConn is one client connection of node i, held as memNet says.
type memConn struct {
	net.Conn
	net *memNet
	i   int
}

func (c *memConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b) // the reply arrived; the client reads it when memNet lets it
	c.net.mu.Lock()
	until, frozen := c.net.until, c.net.frozen[c.i]
	c.net.mu.Unlock()
	if frozen {
		<-c.net.thaw
		return 0, net.ErrClosed
	}
	time.Sleep(time.Until(until))
	return n, err
}

// newMemNet returns n clients over memNet, to be made and used inside a
// synctest bubble, and how to close them (see stallLocker's finish).
func newMemNet(n int) (*memNet, []redlock.Node, func()) {
	m := &memNet{frozen: map[int]bool{}, thaw: make(chan struct{})}
	nodes := make([]redlock.Node, n)
	clients := make([]*redis.Client, n)
	for i := range n {
		dial := func() (net.Conn, error) {
			client, server := net.Pipe()
			go fakeredis.Serve(server)
			return &memConn{Conn: client, net: m, i: i}, nil
		}
		clients[i] = redis.NewClient(redistest.BubbleOptions(fmt.Sprintf("10.0.0.%d:6379", i+1), dial, -1))
		nodes[i] = clients[i]
	}
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	return m, nodes, closeAll
}

// stallLocker is a Locker over m's nodes with a 50 ms NodeTimeout, its
// nodes dialed, recording its events. finish, which the bubble's function
// defers, thaws the frozen nodes, waits for every call (Drain) and closes
// the clients: a bubble ends only once its goroutines have.
// heldThenStalled is a lease of "k" on three in-memory nodes, taken before
// every node's replies are held for stall from now on.
func heldThenStalled(t *testing.T, direct bool, stall time.Duration) (*redlock.Lease, *recorder, func()) {
	t.Helper()
	m, nodes, closeAll := newMemNet(3)
	l, events, finish := stallLocker(t, m, nodes, closeAll, direct)
	lease, err := l.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	m.stallFor(stall)
	return lease, events, finish
}

func stallLocker(t *testing.T, m *memNet, nodes []redlock.Node, closeAll func(), direct bool) (l *redlock.Locker, events *recorder, finish func()) {
	t.Helper()
	events = &recorder{}
	l, err := redlock.New(nodes, &redlock.Options{NodeTimeout: 50 * time.Millisecond, NoAutoPipeline: direct, NoWakeUps: true, Observer: events})
	require.NoError(t, err)
	var once sync.Once
	finish = func() {
		once.Do(func() {
			close(m.thaw)
			if err := l.Drain(context.Background()); err != nil {
				t.Errorf("Drain: %v", err)
			}
			closeAll()
		})
	}
	// One cycle first: connections dialed, the node guard's first look
	// taken (fakeredis answers no SCRIPT LOAD, which Warm sends).
	lease, err := l.TryLock(t.Context(), "warm", time.Second)
	if err == nil {
		err = lease.Unlock(t.Context())
	}
	if err != nil {
		finish()
		t.Fatal(err)
	}
	events.reset()
	return l, events, finish
}

// lastOf returns r's last event of op.
func lastOf(t *testing.T, r *recorder, op redlock.Op) redlock.Event {
	t.Helper()
	events := r.of(op)
	if len(events) == 0 {
		t.Fatalf("no %v event", op)
	}
	return events[len(events)-1]
}

// When every node's reply is late together (the client stalled past
// NodeTimeout: a GC pause, a starved scheduler), the acquisition,
// extension and release still succeed: the round waits on while the lease
// or the attempt has validity to spend, and says that it did (Stalled).
// Validity still counts from before the first send.
func TestClientStallDoesNotFailHealthyNodes(t *testing.T) {
	const stall = 80 * time.Millisecond // past the 50 ms NodeTimeout
	bothTransports(t, func(t *testing.T, direct bool) {
		t.Run("acquire", func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T) {
				m, nodes, closeAll := newMemNet(3)
				l, events, finish := stallLocker(t, m, nodes, closeAll, direct)
				defer finish()
				m.stallFor(stall)
				start := time.Now()
				lease, err := l.TryLock(t.Context(), "k", time.Second)
				require.NoError(t, err)
				assert.Equal(t, stall, time.Since(start), "decided when the replies were read")
				assert.Equal(t, start.Add(time.Second-12*time.Millisecond), lease.Until(), "validity from before the first send: ttl less the drift allowance")
				e := lastOf(t, events, redlock.OpAcquire)
				assert.True(t, e.Stalled, "the event says every node was late together")
				require.NoError(t, lease.Unlock(t.Context()))
			})
		})
		t.Run("extend", func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T) {
				lease, events, finish := heldThenStalled(t, direct, stall)
				defer finish()
				require.NoError(t, lease.Extend(t.Context(), time.Second))
				assert.True(t, lastOf(t, events, redlock.OpExtend).Stalled)
				assert.False(t, lastOf(t, events, redlock.OpAcquire).Stalled, "the acquisition before the stall was not late")
				require.NoError(t, lease.Unlock(t.Context()))
			})
		})
		t.Run("unlock", func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T) {
				lease, events, finish := heldThenStalled(t, direct, stall)
				defer finish()
				require.NoError(t, lease.Unlock(t.Context()))
				assert.True(t, lastOf(t, events, redlock.OpUnlock).Stalled)
			})
		})
	})
}

// The negative control: a frozen minority is still the node's fault, not
// the client's. One node frozen, one refusing (another value holds the
// key), one granting: the round needs the frozen node's vote, fails it at
// NodeTimeout exactly, as quorum.ErrNoReply and not as a stall, and the
// attempt decides then. In a client stalled past NodeTimeout, the frozen
// node gets NodeTimeout from when the others' replies were read, not
// longer.
func TestFrozenMinorityStillFailsAtNodeTimeout(t *testing.T) {
	bothTransports(t, func(t *testing.T, direct bool) {
		for _, stall := range []time.Duration{0, 80 * time.Millisecond} {
			name := "client running"
			if stall > 0 {
				name = "client stalled"
			}
			t.Run(name, func(t *testing.T) {
				inVirtualTime(t, func(t *testing.T) {
					m, nodes, closeAll := newMemNet(3)
					nodes[1] = &stalledNode{Node: &takenNode{}, net: m} // refuses, as soon as the stall lets it
					l, events, finish := stallLocker(t, m, nodes, closeAll, direct)
					defer finish()
					m.freeze(2)
					m.stallFor(stall)
					start := time.Now()
					_, err := l.TryLock(t.Context(), "k", time.Second)
					took := time.Since(start)
					var qe *redlock.QuorumError
					require.ErrorAs(t, err, &qe)
					assert.Equal(t, stall+50*time.Millisecond, took, "the frozen node is given NodeTimeout after the others were heard")
					assert.ErrorIs(t, qe.Nodes[2].Err, quorum.ErrNoReply)
					assert.NotErrorIs(t, qe.Nodes[2].Err, redlock.ErrClientStalled, "one node late among answering ones is the node's fault")
					assert.Equal(t, redlock.Granted, qe.Nodes[0].Outcome)
					assert.Equal(t, redlock.Taken, qe.Nodes[1].Outcome)
					assert.Equal(t, stall > 0, lastOf(t, events, redlock.OpAcquire).Stalled)
				})
			})
		}
	})
}

// When no node answers at all, the round waits at most StallAfter
// (ten NodeTimeouts, at least half a second) and says that every node was
// late together: ErrClientStalled, which still matches quorum.ErrNoReply.
func TestEveryNodeLateTogetherIsReportedAsAStall(t *testing.T) {
	bothTransports(t, func(t *testing.T, direct bool) {
		inVirtualTime(t, func(t *testing.T) {
			m, nodes, closeAll := newMemNet(3)
			l, events, finish := stallLocker(t, m, nodes, closeAll, direct)
			defer finish()
			for i := range 3 {
				m.freeze(i)
			}
			start := time.Now()
			_, err := l.TryLock(t.Context(), "k", 10*time.Second)
			assert.Equal(t, 500*time.Millisecond, time.Since(start), "StallAfter(50ms): half a second")
			var qe *redlock.QuorumError
			require.ErrorAs(t, err, &qe)
			for _, n := range qe.Nodes {
				assert.ErrorIs(t, n.Err, redlock.ErrClientStalled, n.Name)
				assert.ErrorIs(t, n.Err, quorum.ErrNoReply, n.Name)
			}
			assert.Contains(t, err.Error(), "every node late together")
			assert.True(t, lastOf(t, events, redlock.OpAcquire).Stalled)
		})
	})
}

// stalledNode is a Node whose replies wait for memNet's stall, as a
// memConn's do.
type stalledNode struct {
	redlock.Node
	net *memNet
}

func (s *stalledNode) hold() {
	s.net.mu.Lock()
	until := s.net.until
	s.net.mu.Unlock()
	time.Sleep(time.Until(until))
}

func (s *stalledNode) Do(ctx context.Context, args ...any) *redis.Cmd {
	defer s.hold()
	return s.Node.Do(ctx, args...)
}

func (s *stalledNode) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	defer s.hold()
	return s.Node.EvalSha(ctx, sha, keys, args...)
}

func (s *stalledNode) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	defer s.hold()
	return s.Node.Eval(ctx, src, keys, args...)
}
