package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock"
)

// Warm dials every node: afterwards each server has a connection, and the
// first TryLock uses it. Without Warm (the control) that TryLock is what
// dials.
func TestWarmDialsEveryNode(t *testing.T) {
	for _, warm := range []bool{true, false} {
		name := "cold"
		if warm {
			name = "warm"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3)
			l := newLocker(t, c.nodes(nil), nil)
			if warm {
				if err := l.Warm(t.Context()); err != nil {
					t.Fatalf("Warm: %v", err)
				}
			}
			// Warm dials one connection in the client's main pool and one
			// in its pipeline pool (go-redis keeps pipelines apart), which
			// carries the auto-pipeline's batches.
			before := make([]int, len(c.servers))
			for i, m := range c.servers {
				want := 0
				if warm {
					want = 2
				}
				if before[i] = m.TotalConnectionCount(); before[i] != want {
					t.Errorf("node %d: %d connections before the first lock; want %d", i, before[i], want)
				}
			}
			lease, err := l.TryLock(t.Context(), "warm", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			// Warm left its connections idle in the pools, and TryLock
			// took them; cold, TryLock dialled them. (Drain first: TryLock
			// returns on a majority, before the last node's call is over.)
			drain(t, l)
			for i, m := range c.servers {
				got := m.TotalConnectionCount()
				if warm && got != before[i] {
					t.Errorf("node %d: %d connections after the first TryLock; want the %d Warm dialled", i, got, before[i])
				}
				if !warm && got == 0 {
					t.Errorf("node %d: no connection after the first TryLock", i)
				}
			}
			if err := lease.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Warm loads every script: a fenced cycle then sends no EVAL, as no EVALSHA
// meets NOSCRIPT. Without Warm (the control) the first scripts fall back to
// EVAL.
func TestWarmLoadsTheScripts(t *testing.T) {
	for _, warm := range []bool{true, false} {
		t.Run(map[bool]string{true: "warm", false: "cold"}[warm], func(t *testing.T) {
			c := newCluster(t, 3)
			var evals atomic.Int32
			l := newLocker(t, c.nodes(func(_ int, n redlock.Node) redlock.Node {
				return &evalCounter{Node: n, evals: &evals}
			}), &redlock.Options{Fencing: true})
			if warm {
				if err := l.Warm(t.Context()); err != nil {
					t.Fatalf("Warm: %v", err)
				}
			}
			lease, err := l.TryLock(t.Context(), "warm", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Extend(t.Context(), time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := lease.Check(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := lease.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			drain(t, l)
			got := evals.Load()
			if warm && got != 0 {
				t.Errorf("%d EVALs after Warm; want none (every script loaded)", got)
			}
			if !warm && got == 0 {
				t.Errorf("no EVAL without Warm: the control shows nothing")
			}
		})
	}
}

type evalCounter struct {
	redlock.Node
	evals *atomic.Int32
}

// Eval counts the lock's own scripts: the node guard's examine script is
// never loaded (see internal/guard), so Warm runs it with EVAL.
func (e *evalCounter) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	if !strings.HasPrefix(keys[0], "redlock:memory") {
		e.evals.Add(1)
	}
	return e.Node.Eval(ctx, src, keys, args...)
}

// Warm reports each node that it could not ready, by name, and the others as
// ready; a node that does not answer ends with ctx, not a hang.
func TestWarmReportsEachNode(t *testing.T) {
	c := newCluster(t, 3)
	proxies, nodes := c.proxied(t)
	c.servers[1].Close()          // refuses connections
	proxies[2].SetBlackhole(true) // accepts, never answers
	l := newLocker(t, nodes, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err := l.Warm(ctx)
	var we *redlock.WarmError
	if !errors.As(err, &we) {
		t.Fatalf("Warm: %v; want a *WarmError", err)
	}
	if len(we.Nodes) != 3 || we.Nodes[0].Outcome != redlock.Granted || we.Nodes[1].Outcome != redlock.Failed || we.Nodes[2].Outcome != redlock.Failed {
		t.Fatalf("results %+v; want node 0 ready, 1 and 2 failed", we.Nodes)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Warm: %v; want the black-holed node's error to match the context's deadline", err)
	}
	for _, i := range []int{1, 2} {
		if !strings.Contains(err.Error(), we.Nodes[i].Name) {
			t.Errorf("error %q does not name node %d (%s)", err, i, we.Nodes[i].Name)
		}
	}
	if strings.Contains(err.Error(), "; "+we.Nodes[0].Name) {
		t.Errorf("error %q names the ready node 0", err)
	}

	if err := (*redlock.Locker)(nil).Warm(t.Context()); err == nil {
		t.Error("Warm on a nil Locker: no error")
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if err := l.Warm(nil); err == nil || !strings.Contains(err.Error(), "nil context") { //nolint:staticcheck
		t.Errorf("Warm(nil): %v; want an error naming the nil context", err)
	}
}

// A client whose MinIdleConns asks for several connections gets them all
// from Warm, dialled and idle in its pool.
func TestWarmOpensMinIdleConns(t *testing.T) {
	c := newCluster(t, 3)
	var nodes []redlock.Node
	for _, m := range c.servers {
		cl := redis.NewClient(&redis.Options{Addr: m.Addr(), MinIdleConns: 4})
		t.Cleanup(func() { cl.Close() })
		nodes = append(nodes, cl)
	}
	l := newLocker(t, nodes, &redlock.Options{NoAutoPipeline: true})
	if err := l.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if idle := n.(*redis.Client).PoolStats().IdleConns; idle < 4 {
			t.Errorf("node %d: %d idle connections after Warm; want MinIdleConns, 4", i, idle)
		}
	}
}
