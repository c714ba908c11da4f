package redlock

// The coordinator over its transports (internal/wire): what a caller of
// TryLock and Unlock sees when a node's pipeline refuses, holds, withdraws
// or reruns commands, and when a call runs out of its own time.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// submitted is one command submitted to a node's transport on its own
// round.
type submitted struct {
	round *quorum.Round[Outcome]
	calls *tracker
}

// submitDo sends args to n through its transport, as fanOut would for one
// node, and reports whether the transport took it (false: refused at once,
// ErrNodeBusy).
func submitDo(n node, args ...any) (submitted, bool) {
	s := submitted{round: quorum.Begin[Outcome](1), calls: &tracker{}}
	s.calls.add(1)
	read := func(_ *ballot, _ int, cmd *redis.Cmd) (Outcome, error) {
		if err := cmd.Err(); err != nil {
			return Failed, err
		}
		return Granted, nil
	}
	key := ""
	if len(args) > 1 {
		key = fmt.Sprint(args[1])
	}
	b := &ballot{round: s.round, read: read, calls: s.calls, nodes: []node{n}}
	n.link.Submit(context.Background(), wire.Command{Key: key, Args: args}, wire.Send{Timeout: time.Minute}, b, 0)
	select {
	case <-s.round.Settled(0):
		if _, err := s.round.Result(0); errors.Is(err, wire.ErrNodeBusy) {
			return s, false
		}
	default:
	}
	return s, true
}

// errors.Is works through a QuorumError for a refused pipelined call.
func TestPipelineRefusalIsReported(t *testing.T) {
	m := redistest.Miniredis(t)
	_ = m.Set("redlock:memory", "0 ?") // trusted: see trust in helpers_test.go
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	hooks := &redistest.Batches{Hold: make(chan struct{})}
	client.AddHook(hooks)
	l, err := New([]Node{client}, nil)
	require.NoError(t, err)
	blocker, ok := submitDo(l.nodes[0], "PING") // its batch held in flight
	require.True(t, ok)
	require.Eventually(t, func() bool { return len(hooks.Pipelines()) == 1 }, 5*time.Second, time.Millisecond)
	var fillers []submitted
	for { // and the queue full behind it
		s, ok := submitDo(l.nodes[0], "PING")
		if !ok {
			break
		}
		fillers = append(fillers, s)
	}
	require.Len(t, fillers, wire.PipelineQueue)
	_, err = l.TryLock(t.Context(), "k", time.Minute)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.True(t, errors.Is(qe.Nodes[0].Err, wire.ErrNodeBusy), "got %v", qe.Nodes[0].Err)
	close(hooks.Hold)
	for _, s := range append(fillers, blocker) {
		_, err := s.round.Result(0)
		require.NoError(t, err)
	}
	assert.NoError(t, l.Drain(t.Context()))
}

// heldNodes returns three miniredis servers and a Locker over them whose
// node 0 sends its first batch (a PING submitted here) only when the
// returned release is called: meanwhile node 0's sender is busy, and
// everything the Locker sends there queues behind it.
func heldNodes(t *testing.T, opts *Options) (servers []*miniredis.Miniredis, clients []*redis.Client, l *Locker, release func()) {
	t.Helper()
	hooks := &redistest.Batches{Hold: make(chan struct{})}
	var nodes []Node
	for i := range 3 {
		m := redistest.Miniredis(t)
		_ = m.Set("redlock:memory", "0 ?") // trusted: see trust in helpers_test.go
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		if i == 0 {
			c.AddHook(hooks)
		}
		servers, clients, nodes = append(servers, m), append(clients, c), append(nodes, c)
	}
	l, err := New(nodes, opts)
	require.NoError(t, err)
	blocker, ok := submitDo(l.nodes[0], "PING")
	require.True(t, ok)
	require.Eventually(t, func() bool { return len(hooks.Pipelines()) == 1 }, 5*time.Second, time.Millisecond, "node 0's first batch is held")
	var once sync.Once
	release = func() {
		once.Do(func() { close(hooks.Hold) })
		_, err := blocker.round.Result(0)
		require.NoError(t, err)
	}
	t.Cleanup(release)
	return servers, clients, l, release
}

// After node 0 lost its script cache and cached only the release script
// again, a fenced acquisition decided by nodes 1 and 2 and unlocked at once
// leaves node 0 a batch of EVALSHA acquire (fenced), EVALSHA fence and
// EVALSHA release on one key. The first two answer NOSCRIPT, the release
// finds nothing to delete; the pipeline must then run all three again in
// that order, so that the key does not stay on node 0 for its TTL.
func TestPipelineReleaseNeverOvertakesItsAcquisitionAfterNoscript(t *testing.T) {
	servers, clients, l, release := heldNodes(t, &Options{Fencing: true, NodeTimeout: 5 * time.Second})
	require.NoError(t, clients[0].ScriptFlush(t.Context()).Err())
	require.NoError(t, clients[0].ScriptLoad(t.Context(), releaseLua).Err())

	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err, "nodes 1 and 2 decide")
	require.NoError(t, lease.Unlock(t.Context()))
	release()
	require.NoError(t, l.Drain(t.Context()))
	assert.False(t, servers[0].Exists("k"), "node 0 holds %q after its release was sent", "k")
	counter, err := servers[0].Get("{k}:fencing")
	require.NoError(t, err, "phase 1 ran on node 0 (once)")
	assert.Equal(t, "1", counter)
}

// A release refused by node 0's full queue while its own SET still waits in
// that queue withdraws the SET: the key never reaches node 0.
func TestPipelineReleaseWithdrawsItsQueuedSetWhenTheQueueIsFull(t *testing.T) {
	servers, _, l, release := heldNodes(t, &Options{NodeTimeout: 5 * time.Second})
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err, "nodes 1 and 2 decide")
	var fillers []submitted
	for {
		s, ok := submitDo(l.nodes[0], "PING")
		if !ok {
			break
		}
		fillers = append(fillers, s)
	}
	require.Len(t, fillers, wire.PipelineQueue-1, "the SET and the fillers fill the queue")
	acquired := lease.acquired
	require.NoError(t, lease.Unlock(t.Context()))
	select {
	case <-acquired.Settled(0):
		_, setErr := acquired.Result(0)
		assert.ErrorIs(t, setErr, wire.ErrWithdrawn, "the SET was withdrawn before it was sent")
	default:
		t.Error("the SET still waits in node 0's queue after its release")
	}

	release()
	for _, s := range fillers {
		_, err := s.round.Result(0)
		require.NoError(t, err)
	}
	require.NoError(t, l.Drain(t.Context()))
	assert.False(t, servers[0].Exists("k"), "node 0 holds the key that its release was refused for")
}

// hungNode is a node whose client honours contexts but never answers: each
// call ends with its context's error, as go-redis's does when a deadline
// passes while it dials or waits for a pooled connection.
type hungNode struct{ *redis.Client }

func (h hungNode) Do(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	<-ctx.Done()
	cmd.SetErr(ctx.Err())
	return cmd
}

// A call that runs out of its own time (NodeTimeout) fails with
// wire.ErrNodeTimeout, which callers can tell from their own deadline: it does not
// match context.DeadlineExceeded. The caller's own deadline still does.
func TestNodeTimeoutIsNotTheCallersDeadline(t *testing.T) {
	m := redistest.Miniredis(t)
	_ = m.Set("redlock:memory", "0 ?") // trusted: see trust in helpers_test.go
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	l, err := New([]Node{hungNode{client}}, &Options{NodeTimeout: 20 * time.Millisecond})
	require.NoError(t, err)

	round := l.fanOut(context.Background(), fan{timeout: l.opts.NodeTimeout, value: "v"}, acquireCommand("k", "v", 1000), readAcquire)
	_, err = round.Result(0)
	assert.ErrorIs(t, err, wire.ErrNodeTimeout)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "the node's timeout reads as the caller's deadline: %v", err)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	round = l.fanOut(ctx, fan{timeout: time.Minute, value: "v"}, acquireCommand("k", "v", 1000), readAcquire)
	_, err = round.Result(0)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller's own deadline")

	_, err = l.TryLock(context.Background(), "k", time.Minute)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, l.Drain(t.Context()))
}

// setTypes is a go-redis hook that records the Go type of every SET a
// client sends, alone or in a pipeline.
type setTypes struct {
	mu    sync.Mutex
	types []string
}

func (h *setTypes) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if strings.EqualFold(c.Name(), "set") {
			h.types = append(h.types, fmt.Sprintf("%T", c))
		}
	}
}

func (h *setTypes) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.types...)
}

func (h *setTypes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *setTypes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}

func (h *setTypes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds...)
		return next(ctx, cmds)
	}
}

// The auto-pipeline sends an acquisition's SET as a RawCmd, alone (guard
// off) and with the guard's companion; the votes come out as before: a
// grant, contention, and a server's error reply named in the QuorumError.
func TestAcquisitionsAreReadRaw(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		t.Run(fmt.Sprintf("guarded=%v", guarded), func(t *testing.T) {
			ctx := t.Context()
			servers, nodes := miniNodes(t, 3)
			hooks := make([]*setTypes, len(nodes))
			for i, n := range nodes {
				hooks[i] = new(setTypes)
				n.(*redis.Client).AddHook(hooks[i])
			}
			l, err := New(nodes, &Options{NodeTimeout: 5 * time.Second, NoQuarantine: !guarded})
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Drain(context.Background()) })

			lease, err := l.TryLock(ctx, "k", time.Minute)
			require.NoError(t, err)
			// A majority decided: the third node's SET may not have left
			// its pipeline yet. Drain waits for it (not for the lease).
			require.NoError(t, l.Drain(ctx))
			for i, h := range hooks {
				assert.Equal(t, []string{"*redis.RawCmd"}, h.seen(), "node %d", i)
			}
			_, err = l.TryLock(ctx, "k", time.Minute)
			assert.ErrorIs(t, err, ErrNotObtained, "held: contention")
			require.NoError(t, lease.Unlock(ctx))
			require.NoError(t, l.Drain(ctx))

			for _, m := range servers[:2] {
				m.Lpush("k", "x") // WRONGTYPE for SET ... GET
			}
			_, err = l.TryLock(ctx, "k", time.Minute)
			var qe *QuorumError
			require.ErrorAs(t, err, &qe)
			for i := range 2 {
				assert.True(t, redis.HasErrorPrefix(qe.Nodes[i].Err, "WRONGTYPE"), "node %d: %v", i, qe.Nodes[i].Err)
			}
			assert.NoError(t, qe.Nodes[2].Err)
		})
	}
}

// An error reply to an acquisition read raw is read again by go-redis (the
// SET sent again as a plain command), so that it does what it does for its
// own commands: READONLY gets its type of error, and the connection that
// answered it is retired (a demoted primary behind a DNS name or a proxy
// that moved on is left), where reading it raw kept every connection. A
// WRONGTYPE reply gets go-redis's reply type, as a plain Do gets.
func TestErrorRepliesAreReadByGoRedis(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		t.Run(fmt.Sprintf("guarded=%v", guarded), func(t *testing.T) {
			ctx := t.Context()
			m := redistest.Miniredis(t)
			_ = m.Set("redlock:memory", "0 ?")
			var readOnly atomic.Bool
			m.Server().SetPreHook(func(p *server.Peer, cmd string, args ...string) bool {
				if readOnly.Load() && strings.EqualFold(cmd, "set") && len(args) > 0 && args[0] == "k" {
					p.WriteError("READONLY You can't write against a read only replica.")
					return true
				}
				return false
			})
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: 1, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond})
			t.Cleanup(func() { c.Close() })
			l, err := New([]Node{c}, &Options{NodeTimeout: 5 * time.Second, NoQuarantine: !guarded})
			require.NoError(t, err)
			require.True(t, l.nodes[0].pipelined, "the auto-pipeline")

			lease, err := l.TryLock(ctx, "k", time.Minute) // the connections dialed
			require.NoError(t, err)
			require.NoError(t, lease.Unlock(ctx))
			require.NoError(t, l.Drain(ctx))

			readOnly.Store(true)
			dials := m.TotalConnectionCount()
			_, err = l.TryLock(ctx, "k", time.Minute)
			var qe *QuorumError
			require.ErrorAs(t, err, &qe)
			assert.True(t, redis.IsReadOnlyError(qe.Nodes[0].Err), "%v", qe.Nodes[0].Err)
			plain := c.Do(ctx, "SET", "k", "v", "NX", "PX", 1000, "GET").Err()
			require.True(t, redis.IsReadOnlyError(plain))
			assert.True(t, inChain(qe.Nodes[0].Err, plain), "the error go-redis gives its own command (%T), not %T", plain, qe.Nodes[0].Err)
			assert.Greater(t, m.TotalConnectionCount(), dials, "the connection that answered READONLY was retired")

			readOnly.Store(false)
			require.NoError(t, l.Drain(ctx))
			m.Del("k")
			_, _ = m.Lpush("k", "x")
			_, err = l.TryLock(ctx, "k", time.Minute)
			require.ErrorAs(t, err, &qe)
			plain = c.Do(ctx, "SET", "k", "v", "NX", "PX", 1000, "GET").Err()
			require.True(t, redis.HasErrorPrefix(plain, "WRONGTYPE"))
			assert.True(t, redis.HasErrorPrefix(qe.Nodes[0].Err, "WRONGTYPE"), "%v", qe.Nodes[0].Err)
			m.Del("k")
			lease, err = l.TryLock(ctx, "k", time.Minute)
			require.NoError(t, err, "a writable node grants at once")
			require.NoError(t, lease.Unlock(ctx))
		})
	}
}

// inChain reports whether err's chain holds an error of want's type.
func inChain(err, want error) bool {
	if err == nil {
		return false
	}
	if fmt.Sprintf("%T", err) == fmt.Sprintf("%T", want) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return inChain(u.Unwrap(), want)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if inChain(e, want) {
				return true
			}
		}
	}
	return false
}
