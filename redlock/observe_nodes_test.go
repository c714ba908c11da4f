package redlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock/redlock/redlock"
	"github.com/stretchr/testify/require"
)

// afterDrain is an Observer that counts events and flags any that arrives
// while the test says nothing may be in flight (after Drain, before the next
// operation).
type afterDrain struct {
	mu     sync.Mutex
	closed atomic.Bool
	late   []redlock.Event // observed while closed
	events []redlock.Event
}

func (a *afterDrain) Observe(e redlock.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		a.late = append(a.late, e)
	}
	a.events = append(a.events, e)
}

func (a *afterDrain) take() []redlock.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.events
	a.events = nil
	return out
}

// Every operation decided without a slow, failing node reports exactly
// one OpLateFailure for it, and Drain waits for it: nothing is observed
// once Drain has returned.
func TestLateFailureOncePerRoundAndDrainWaits(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	var n atomic.Int64
	slow := func(ctx context.Context) error {
		time.Sleep(time.Duration(n.Add(1)%4) * 500 * time.Microsecond) // around the decision
		return errInjected
	}
	nodes := c.nodes(func(i int, n redlock.Node) redlock.Node {
		if i != 2 {
			return n
		}
		return &hookNode{Node: n,
			beforeDo:     func(ctx context.Context, _ []any) error { return slow(ctx) },
			beforeScript: func(ctx context.Context, _ []string, _ []any) error { return slow(ctx) },
		}
	})
	obs := &afterDrain{}
	l := newLocker(t, nodes, &redlock.Options{Observer: obs})
	for round := range 60 {
		obs.closed.Store(false)
		lease, err := l.TryLock(ctx, "k", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, lease.Extend(ctx, 10*time.Second))
		require.NoError(t, lease.Check(ctx))
		require.NoError(t, lease.Unlock(ctx))
		drain(t, l)
		obs.closed.Store(true)
		time.Sleep(30 * time.Millisecond) // anything still running shows now
		late := map[redlock.Op]int{}
		unanswered := map[redlock.Op]int{}
		for _, e := range obs.take() {
			if e.Op == redlock.OpLateFailure {
				late[e.Of]++
				continue
			}
			if len(e.Nodes) == 3 && e.Nodes[2].Outcome == redlock.Unanswered {
				unanswered[e.Op]++
			}
		}
		for _, op := range []redlock.Op{redlock.OpAcquire, redlock.OpExtend, redlock.OpCheck, redlock.OpUnlock} {
			require.Equal(t, unanswered[op], late[op], "round %d: %v: one late failure per operation that did not wait for node 2", round, op)
		}
		obs.mu.Lock()
		require.Empty(t, obs.late, "round %d: events observed after Drain returned", round)
		obs.mu.Unlock()
	}
}
