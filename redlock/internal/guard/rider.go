package guard

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// The guard rides with the transport: its companions follow every batch
// (or direct call) that carries a guarded command, and its verdict decides
// whether those commands' grants count (see the package doc).
var _ wire.Rider[Companions] = (*Guard)(nil)

// Board returns the companions of a trip whose first guarded command is on
// key: of the marker that covers key.
func (g *Guard) Board(ctx context.Context, key string) Companions {
	return g.companions(ctx, g.markerFor(key))
}

// AppendTo appends c's commands to cmds, in the order they are sent.
func (g *Guard) AppendTo(c Companions, cmds []redis.Cmder) []redis.Cmder {
	return c.appendTo(cmds)
}

// AskApart sends c's commands side by side through n, a node that cannot
// pipeline, and sets their replies on them.
func (g *Guard) AskApart(ctx context.Context, n wire.Node, c Companions) {
	var wg sync.WaitGroup
	if c.pttl != nil {
		wg.Go(func() {
			left, err := n.Do(ctx, c.pttl.Args()...).Int64()
			c.pttl.SetVal(left)
			c.pttl.SetErr(err)
		})
	} else {
		wg.Go(func() {
			value, err := n.Do(ctx, c.get.Args()...).Text()
			c.get.SetVal(value)
			c.get.SetErr(err)
		})
	}
	wg.Go(func() {
		cached, err := n.Do(ctx, c.exists.Args()...).BoolSlice()
		c.exists.SetVal(cached)
		c.exists.SetErr(err)
	})
	if c.time != nil {
		wg.Go(func() {
			at, err := timeOf(n.Do(ctx, c.time.Args()...))
			c.time.SetVal(at)
			c.time.SetErr(err)
		})
	}
	wg.Wait()
}

// Judge reads c's replies and returns the verdict on the trip's guarded
// commands (see judge).
func (g *Guard) Judge(ctx context.Context, ex redis.Scripter, c Companions, t wire.Trip) error {
	return g.judge(ctx, ex, c, t.Sent, t.Received, t.Suspect)
}

// Demoted drops what this guard examined on a node that answered
// READONLY: a replica now, whose memory a full resync may replace with
// another primary's while its process, script cache and marker value stay
// (a resync can bring the very marker back, expiry and all). Should it be
// promoted again, the next batch examines it, and finds that it read from a
// primary since.
func (g *Guard) Demoted() { g.drop() }

// Warm examines a standalone node now rather than at its first guarded
// command. A Redis Cluster node has a marker per slot: each is examined on
// its first use.
func (g *Guard) Warm(ctx context.Context, ex redis.Scripter) error {
	if g.cluster {
		return nil
	}
	_, _, err := g.examine(ctx, ex, markerKey)
	return err
}

// Forget drops what this guard examined, which a trust (Trust) made stale:
// a standalone node is examined again at once, a cluster node's slots on
// their next use.
func (g *Guard) Forget(ctx context.Context, ex redis.Scripter) error {
	g.drop()
	return g.Warm(ctx, ex)
}

// Current is the guard's verdict now, over every marker it examined: the
// longest quarantine.
func (g *Guard) Current(now time.Time) error {
	g.mu.Lock()
	var worst memoryState
	for _, s := range g.memory {
		if g.clearAt(s).After(g.clearAt(worst)) {
			worst = s
		}
	}
	g.mu.Unlock()
	return g.verdictAt(worst, now)
}

// NeverWhole reports whether every memory this guard examined began less
// than the quarantine's length ago: since its memory began, the node has
// not been able to count for any guarded lease. False where it examined
// nothing, and for a memory an operator trusted.
func (g *Guard) NeverWhole(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.memory) == 0 {
		return false
	}
	for _, s := range g.memory {
		if !g.clearAt(s).After(now) {
			return false
		}
	}
	return true
}

// Seen is the node's marker as this guard last examined it (ok false
// where it examined none yet), for a trust on the condition that nothing
// changed since (TrustIf).
func (g *Guard) Seen() (seen Seen, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	state, ok := g.memory[markerKey]
	return Seen{Marker: state.marker}, ok
}

// CurrentFor is the guard's verdict now on votes about key, from what it
// last examined (nil where it examined nothing for key's marker yet, or
// lets the votes count). It sends nothing: a round decided before the
// node answered reports with it what the node was when last seen.
func (g *Guard) CurrentFor(key string, now time.Time) error {
	g.mu.Lock()
	state, ok := g.memory[g.markerFor(key)]
	g.mu.Unlock()
	if !ok {
		return nil
	}
	return g.verdictAt(state, now)
}

// Clock is the estimator of the node's clock; nil where it is not measured
// (a Redis Cluster node).
func (g *Guard) Clock() *drift.Estimator { return g.clock }

// ReadsClockByExpiry reports whether the node's clock is read through the
// marker's PTTL (else by TIME).
func (g *Guard) ReadsClockByExpiry() bool { return g.expiry.Load() > 0 }

// Excess is how much faster than the drift bound the node's clock is
// measured to run (drift.Estimator.Excess); 0 where not measured.
func (g *Guard) Excess() float64 {
	if g.clock == nil {
		return 0
	}
	return g.clock.Excess()
}
