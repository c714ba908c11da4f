package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/redlock/internal/reply"
)

// companions are the guard's commands that follow guarded commands in one
// pipeline: PTTL of the marker (pttl), or GET of the marker and TIME; and
// SCRIPT EXISTS of the copy of the examine script that proved the marker's
// state (see proof.go).
type Companions struct {
	marker string
	pttl   *redis.IntCmd    // nil: get (and time) instead
	expiry int64            // the marker's absolute expiry pttl is read against
	get    *redis.StringCmd // nil: pttl instead
	exists *redis.BoolSliceCmd
	proof  *examination   // what exists asks of; nil: never examined, and judge examines
	time   *redis.TimeCmd // nil: the clock is read by pttl, or not measured
	// replication is INFO replication, where the marker's history says
	// every grant reaches every replica and the node's replicas must be
	// watched to keep it true (see failover.go); nil: not needed.
	replication *redis.StringCmd
	// evictions is INFO stats, where the node may evict keys: an eviction
	// may take lock keys and spare the marker (volatile-ttl evicts the
	// soonest to expire), so a count that moved sends the guard to
	// examine again, and the memory begins then; nil: not needed.
	evictions *redis.StringCmd
}

// The companions' arguments, which every call shares (nothing writes them).
var (
	pttlMarkerArgs = []any{"pttl", markerKey}
	getMarkerArgs  = []any{"get", markerKey}
	timeArgs       = []any{"time"}
	// unprovenExistsArgs asks of no script (no copy's proof yet): its reply
	// is not read, only whether the node allows SCRIPT EXISTS.
	unprovenExistsArgs = []any{"script", "exists", "0000000000000000000000000000000000000000"}
)

func (g *Guard) companions(ctx context.Context, marker string) Companions {
	c := Companions{marker: marker}
	var state memoryState
	if marker == markerKey {
		if s := g.standalone.Load(); s != nil {
			state = *s
		}
	} else {
		g.mu.Lock()
		state = g.memory[marker]
		g.mu.Unlock()
	}
	c.proof = state.proof
	watch, evicts := g.needs(state)
	if watch {
		c.replication = redis.NewStringCmd(ctx, replicationInfoArgs...)
	}
	if evicts {
		c.evictions = redis.NewStringCmd(ctx, statsInfoArgs...)
	}
	if c.proof != nil {
		c.exists = redis.NewBoolSliceCmd(ctx, c.proof.existsArgs...)
	} else {
		// Nothing to prove yet, but a user whose ACL lacks SCRIPT EXISTS
		// hears of it at first use.
		c.exists = redis.NewBoolSliceCmd(ctx, unprovenExistsArgs...)
	}
	if at := g.expiry.Load(); at > 0 && marker == markerKey {
		c.pttl, c.expiry = redis.NewIntCmd(ctx, pttlMarkerArgs...), at
		return c
	}
	get := getMarkerArgs
	if marker != markerKey {
		get = []any{"get", marker}
	}
	c.get = redis.NewStringCmd(ctx, get...)
	if g.clock != nil {
		c.time = redis.NewTimeCmd(ctx, timeArgs...)
	}
	return c
}

// lacks reports whether c is without a companion that watch or evicts
// (from needs) asks for.
func (c *Companions) lacks(watch, evicts bool) bool {
	return watch && c.replication == nil || evicts && c.evictions == nil
}

// needs says which optional companions a batch judged by state must carry:
// the replication companion, where every grant reaches every replica and
// stays so only while the node's replicas are watched (see failover.go),
// and the eviction companion, where the node may evict (see eviction.go).
func (g *Guard) needs(state memoryState) (watch, evicts bool) {
	return g.waitReplicas > 0 && state.history.covered(), state.evicts
}

// appendTo appends the companions to cmds, in the order they are sent.
func (c *Companions) appendTo(cmds []redis.Cmder) []redis.Cmder {
	if c.pttl != nil {
		cmds = append(cmds, c.pttl)
	} else {
		cmds = append(cmds, c.get)
	}
	if c.exists != nil {
		cmds = append(cmds, c.exists)
	}
	if c.time != nil {
		cmds = append(cmds, c.time)
	}
	if c.replication != nil {
		cmds = append(cmds, c.replication)
	}
	if c.evictions != nil {
		cmds = append(cmds, c.evictions)
	}
	return cmds
}

// judge reads the companions of a round trip sent at sent and answered at
// received, and returns the verdict on its guarded commands: nil, a
// QuarantineError, or the error that kept the guard from deciding (which
// fails those votes too: a guard that cannot look must not pass). It
// examines the node through ex when the companions say so, or when suspect
// (a command in the round trip met NOSCRIPT: a new server process).
func (g *Guard) judge(ctx context.Context, ex redis.Scripter, c Companions, sent, received time.Time, suspect bool) error {
	if c.time != nil {
		if err := g.observe(c.time, sent, received); err != nil {
			return err
		}
	}
	g.mu.Lock()
	state, known := g.memory[c.marker]
	g.mu.Unlock()

	if c.pttl != nil {
		same, err := g.readExpiry(c, sent, received)
		if err != nil {
			return err
		}
		known = known && same && state.expiry == c.expiry
	} else {
		value, err := c.get.Result()
		switch {
		case errors.Is(err, redis.Nil):
			known = false // missing: a restart, a flush, an eviction
		case reply.DeniedByACL(err):
			return reply.Denied(fmt.Sprintf("GET of the guard's marker %q", c.marker), err)
		case err != nil:
			if _, _, redirected := reply.Redirection(err); !redirected {
				return fmt.Errorf("redlock: GET of the guard's marker %q: %w", c.marker, err)
			}
			known = false // a cluster slot migrating: examine through the ClusterClient
		case value != state.marker:
			known = false
		}
	}
	cached, err := c.exists.Result()
	switch {
	case err != nil:
		return existsError(err)
	case c.proof == nil:
		known = false // never examined
	case len(cached) != 1 || !cached[0]:
		known = false // another process, or a flushed script cache
	case state.proof != c.proof:
		known = false // examined again since the companions left
	case c.lacks(g.needs(state)):
		// Built from an older state of the same process (later
		// examinations reuse its proof), the companions lack one that
		// the state examined since needs: look again.
		known = false
	}
	if c.replication != nil {
		changed, err := state.history.changedIn(c.replication)
		if err != nil {
			return err
		}
		known = known && !changed
	}
	if c.evictions != nil {
		evicted, err := evictedIn(c.evictions)
		if err != nil {
			return err
		}
		known = known && evicted == state.evicted // fewer: CONFIG RESETSTAT hid how many
	}
	if !known || suspect {
		var (
			err      error
			weakened bool
		)
		if state, weakened, err = g.examine(ctx, ex, c.marker); err != nil {
			return err
		}
		if weakened {
			return errWeakened
		}
	}
	return g.verdict(state)
}

// readExpiry reads the marker's PTTL: whether the marker is the one
// examined, and with it the node's clock, its absolute expiry minus the
// PTTL. A missing marker (-2) or one without an expiry (-1) is not the one
// examined. A clock reading that does not fit the node's clock so far is
// not counted, and the marker is not taken for the one examined: a rewrite
// of the marker moves its expiry by years, a jump of the node's clock moves
// the reading as far as it jumped, and the examination that follows tells
// which (its TIME is counted instead).
func (g *Guard) readExpiry(c Companions, sent, received time.Time) (same bool, err error) {
	left, err := c.pttl.Result()
	switch {
	case reply.DeniedByACL(err):
		return false, reply.Denied(fmt.Sprintf("PTTL of the guard's marker %q", c.marker), err)
	case err != nil:
		return false, fmt.Errorf("redlock: PTTL of the guard's marker %q: %w", c.marker, err)
	case left < 0:
		return false, nil
	}
	r := drift.Reading{Sent: sent, Received: received, Node: time.UnixMilli(c.expiry - left), Resolution: time.Millisecond}
	return g.clock.ObserveIfFits(r), nil
}
