package guard

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/internal/hashtag"
	"github.com/redlock/redlock/redlock/internal/reply"
	"github.com/redlock/redlock/redlock/internal/wire"
)

var (
	//go:embed scripts/examine.lua
	examineLua    string
	examineScript = wire.NewScript("guard's examine", "TIME, GET, SET, INFO, PEXPIRETIME, PTTL", examineLua)

	//go:embed scripts/trust.lua
	trustLua    string
	trustScript = wire.NewScript("trust", "GET, SET, INFO", trustLua)
)

// expiryAgreement is how closely a node's key expiry must follow its TIME
// for the guard to read the node's clock through the marker's PTTL: within
// one script, with PTTL in whole milliseconds. A server whose
// TTLs do not run by its clock (miniredis without ClockTTL) disagrees by
// more as soon as its marker ages, and is read by TIME.
const expiryAgreement = 5 * time.Millisecond

// MaxTTLLimit is the longest MaxTTL a Locker may declare (redlock.MaxTTLLimit)
// and the longest quarantine a marker can ask for: a declared value read
// from a node is input, and one above this counts as this (never as less:
// see declaredTTL).
const MaxTTLLimit = 24 * time.Hour

// Guard is one node's guard, shared by both transports: the transport's
// Rider (rider.go). A Locker with Options.NoQuarantine has none.
type Guard struct {
	examSeq atomic.Uint64 // the last examination's seq (see memoryState.seq)
	maxTTL  time.Duration
	bound   drift.Bound
	now     clock.Clock      // Options.Clock: when quarantines end
	clock   *drift.Estimator // nil: not measured (a Redis Cluster node)
	cluster bool

	// waitReplicas is Options.WaitReplicas: how many replicas this
	// Locker's grants wait for, which the marker's history records (see
	// examine.lua and failover.go).
	waitReplicas int

	// examined runs the node's examinations and keeps the copies of the
	// examine script that proved them (see proof.go).
	examined examinations

	// declared is the longest MaxTTL a Locker declared in a marker of any
	// of this Locker's nodes (nanoseconds; see learn), shared by the
	// Locker's guards: a node that lost its memory lost its marker's word
	// too, and the other nodes' markers still tell it.
	declared *atomic.Int64

	// expiry is the absolute expiry (Unix ms) of the marker of a standalone
	// node, as last examined, when the node's key expiry follows its TIME:
	// then one companion, PTTL of the marker, tells at once that the marker
	// is there, that it is the one examined (a rewrite moves the expiry),
	// and the node's clock (the expiry minus the PTTL). 0: GET the marker
	// and read TIME instead (a cluster node, a server without PEXPIRETIME,
	// or one whose TTLs do not follow its clock).
	expiry atomic.Int64

	// standalone is memory[markerKey] (nil: none), read by every batch's
	// companions without taking mu.
	standalone atomic.Pointer[memoryState]

	// ids is shared by the guards of the Locker's nodes, and node is this
	// one's index: of two nodes that answer as one server, one votes (see
	// identity.go). nil: a Locker of one node.
	ids  *Identities
	node int

	mu       sync.Mutex
	memory   map[string]memoryState // by marker key
	claimed  map[string]*claim      // by marker key: the server it was last examined as
	jumpEnd  time.Time              // a jump's quarantine ends (zero: none)
	jumpSize time.Duration
}

// memoryState is what the last examination of one marker found.
type memoryState struct {
	marker string // the marker's value
	expiry int64  // its absolute expiry read by PTTL (see guard.expiry); 0: none
	// The memory's age: at examinedAt (this process's clock) it had
	// existed for age by the node's clock. It is whole once it has existed
	// for the quarantine's length (quarantineTTL, learned meanwhile too),
	// plus the drift bound on what was left: see clearAt.
	examinedAt time.Time
	age        time.Duration
	proof      *examination // the copy of the examine script that examined it (see proof.go)
	// claim is the server the examination found (see identity.go); nil:
	// not compared.
	claim *claim
	// history is the marker's replication history (see failover.go).
	history history
	// evicts says the node may evict keys (maxmemory, and a policy other
	// than noeviction), so that the batches watch its evictions with the
	// eviction companion; evicted is how many keys the process had evicted
	// at the examination (the marker's count).
	evicts  bool
	evicted int64
	// seq orders examinations of this guard by when they were sent: a
	// state is never replaced by one that was sent to the node before it
	// (two examinations can overlap, and the older may finish last).
	seq uint64
}

// Config is what a Guard needs of its Locker.
type Config struct {
	MaxTTL       time.Duration // the Locker's Options.MaxTTL
	WaitReplicas int           // the Locker's Options.WaitReplicas
	Bound        drift.Bound   // the Locker's drift bound
	Clock        clock.Clock   // Options.Clock: when quarantines end
	// Cluster: the node is a Redis Cluster (a marker per hash slot, and
	// its clock is not measured).
	Cluster bool
	// Declared is shared by the guards of one Locker's nodes: the longest
	// MaxTTL declared in a marker of any of them (see learn).
	Declared *atomic.Int64
	// Identities is shared by the guards of one Locker's nodes, and Node
	// is this node's index among them: one server answering for two nodes
	// votes once (see identity.go). Nil: not compared (one node).
	Identities *Identities
	Node       int
}

// New returns a node's guard.
func New(c Config) *Guard {
	if c.Declared == nil {
		c.Declared = new(atomic.Int64)
	}
	g := &Guard{maxTTL: c.MaxTTL, waitReplicas: c.WaitReplicas, bound: c.Bound, now: c.Clock, cluster: c.Cluster, declared: c.Declared, memory: map[string]memoryState{},
		ids: c.Identities, node: c.Node, claimed: map[string]*claim{}}
	if !c.Cluster {
		g.clock = drift.NewEstimator(g.bound)
	}
	return g
}

// markerFor returns the marker that covers key on this node.
func (g *Guard) markerFor(key string) string {
	if g.cluster {
		return slotMarker(hashtag.Slot(key))
	}
	return markerKey
}

// verdict is the verdict on votes judged by state now: a DuplicateError
// where another node owns the server state found, else the quarantine that
// state and the last jump impose, if any. A vote let through is recorded
// as counted for its server (see identity.go).
func (g *Guard) verdict(state memoryState) error {
	if state.claim == nil {
		return g.verdictAt(state, g.now.Now())
	}
	if err := state.claim.duplicate(g.node); err != nil {
		return err
	}
	if err := g.verdictAt(state, g.now.Now()); err != nil {
		return err
	}
	return state.claim.counts(g.node)
}

func (g *Guard) verdictAt(state memoryState, now time.Time) error {
	g.mu.Lock()
	jumpEnd, jumpSize := g.jumpEnd, g.jumpSize
	g.mu.Unlock()
	memoryLeft, jumpLeft := g.clearAt(state).Sub(now), jumpEnd.Sub(now)
	switch {
	case memoryLeft <= 0 && jumpLeft <= 0:
		return nil
	case memoryLeft <= 0:
		return &QuarantineError{Left: jumpLeft, Cause: fmt.Sprintf(jumpCause, jumpSize), JumpLeft: jumpLeft}
	case jumpLeft <= 0:
		return &QuarantineError{Left: memoryLeft, Cause: memoryCause, Forgot: true}
	}
	// Both: each is named with its time left, since a trust lifts only
	// the memory's.
	return &QuarantineError{Left: max(memoryLeft, jumpLeft), Forgot: true, JumpLeft: jumpLeft,
		Cause: fmt.Sprintf("%s (%v more); and %s (%v more)", memoryCause, memoryLeft.Round(time.Millisecond), fmt.Sprintf(jumpCause, jumpSize), jumpLeft.Round(time.Millisecond))}
}

// examine runs examine.lua on the node through ex and records what it
// found: when the node's memory began, in this process's time.
//
// weakened reports that the examination took back the marker's word that
// every grant reaches every replica (see failover.go): a grant that went
// before it on the node must not count.
func (g *Guard) examine(ctx context.Context, ex redis.Scripter, marker string) (_ memoryState, weakened bool, _ error) {
	seq := g.examSeq.Add(1)
	sent := time.Now()
	res, proof, err := g.examined.run(ctx, ex, marker, markerExpiry(), g.quarantineTTL().Milliseconds(), g.waitReplicas, MaxTTLLimit.Milliseconds())
	received := time.Now()
	if err != nil {
		// Whatever this Locker knew of the marker is stale now (unless an
		// examination sent later has recorded since): the next batch
		// examines again.
		g.mu.Lock()
		if g.memory[marker].seq < seq {
			delete(g.memory, marker)
			if marker == markerKey {
				g.standalone.Store(nil)
			}
		}
		g.mu.Unlock()
		return memoryState{}, false, fmt.Errorf("redlock: the guard's examine script (it calls %s on %s): %w", examineScript.Calls, marker, reply.Denied("the guard's examine script", err))
	}
	value, nodeNow, expiry, found, evicts, err := parseExamined(res)
	if err != nil {
		return memoryState{}, false, err
	}
	m, err := parseMarker(value)
	if err != nil {
		return memoryState{}, false, fmt.Errorf("redlock: the guard's marker %q: %w", marker, err)
	}
	g.learn(m.declared)
	state := memoryState{marker: value, proof: proof, examinedAt: g.now.Now(), age: nodeNow.Sub(time.UnixMilli(m.began)), history: m.history, evicts: evicts, evicted: m.evicted, seq: seq}
	if before, err := parseMarker(found); err == nil && found != "" {
		weakened = before.history.covered() && !m.history.covered()
	}
	if g.clock != nil {
		g.record(drift.Reading{Sent: sent, Received: received, Node: nodeNow})
		if expiry.follows(nodeNow) {
			state.expiry = expiry.at
		}
	}
	g.mu.Lock()
	// An examination sent later that recorded first saw the node more
	// recently (a policy set in between, say): it stands.
	if g.memory[marker].seq < seq {
		state.claim = g.claimFor(marker, m.run)
		g.memory[marker] = state
		if g.clock != nil {
			g.expiry.Store(state.expiry)
		}
		if marker == markerKey {
			g.standalone.Store(&state)
		}
	} else {
		state.claim = g.claimed[marker] // the later examination's server
	}
	g.mu.Unlock()
	return state, weakened, nil
}

// clearAt is when state's memory has been whole for the quarantine's
// length: MaxTTL, the longest this Locker knows of now (a longer one
// learned since the examination counts), after the memory began. The
// node's keys expire by its clock, which may run slow: the drift bound on
// what was left is allowed on top. Zero: a state never examined.
func (g *Guard) clearAt(state memoryState) time.Time {
	if state.examinedAt.IsZero() {
		return time.Time{}
	}
	// A memory that began ahead of the node's clock has a negative age,
	// math.MinInt64 once the subtraction that read it saturated: it lengthens
	// the quarantine, saturating too, never wraps it into the past.
	left := drift.Add(g.quarantineTTL(), -max(state.age, -math.MaxInt64))
	if left <= 0 {
		return state.examinedAt
	}
	return state.examinedAt.Add(drift.Add(left, g.bound.Of(left)))
}

// learn records the longest MaxTTL a Locker declared on the node, and
// returns the longer of it and this Locker's own: the quarantine's length.
// Every Locker of a deployment must quarantine as long as the longest lease
// any of them grants, and the marker tells them (see examine.lua).
func (g *Guard) learn(declared time.Duration) time.Duration {
	for {
		seen := g.declared.Load()
		if int64(declared) <= seen || g.declared.CompareAndSwap(seen, int64(declared)) {
			break
		}
	}
	return g.quarantineTTL()
}

// quarantineTTL is how long a quarantine lasts: the longest MaxTTL this
// Locker knows of, its own or one another Locker declared on the node.
func (g *Guard) quarantineTTL() time.Duration {
	return max(g.maxTTL, time.Duration(g.declared.Load()))
}

// markerExpiryRead is the marker's absolute expiry and its PTTL, read in
// one script (at is -1, no expiry, or -3, not to be read, where unknown),
// and the node's TIME at the script's end.
type markerExpiryRead struct {
	at, pttl int64
	end      time.Time
}

// follows reports whether the marker's expiry reads the node's clock: the
// expiry minus the PTTL agrees with the node's TIME, read in the same
// script from start to end (Redis reads a script's keys at the time it
// began; miniredis, as it goes).
func (e markerExpiryRead) follows(start time.Time) bool {
	if e.at <= 0 || e.pttl < 0 {
		return false
	}
	read := time.UnixMilli(e.at - e.pttl)
	return !read.Before(start.Add(-expiryAgreement)) && !read.After(e.end.Add(expiryAgreement))
}

// parseExamined reads examine.lua's reply {marker, seconds, microseconds,
// expiry, pttl, seconds, microseconds, found, evicts}; found is "" where the
// script found no marker (Lua's false comes as a nil reply).
func parseExamined(res []any) (marker string, nodeNow time.Time, expiry markerExpiryRead, found string, evicts bool, err error) {
	if len(res) == 9 {
		marker, ok := res[0].(string)
		start, err1 := timeOfReply(res[1], res[2])
		at, ok3 := res[3].(int64)
		pttl, ok4 := res[4].(int64)
		end, err2 := timeOfReply(res[5], res[6])
		found, ok5 := res[7].(string)
		ok5 = ok5 || res[7] == nil
		ev, ok6 := res[8].(int64)
		if ok && marker != "" && err1 == nil && err2 == nil && ok3 && ok4 && ok5 && ok6 {
			return marker, start, markerExpiryRead{at: at, pttl: pttl, end: end}, found, ev == 1, nil
		}
	}
	return "", time.Time{}, markerExpiryRead{}, "", false, fmt.Errorf("redlock: unexpected reply from the guard's examine script: %v", res)
}

// timeOfReply reads TIME's two fields, as a script passes them on.
func timeOfReply(seconds, microseconds any) (time.Time, error) {
	sec, err := strconv.ParseInt(fmt.Sprint(seconds), 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	usec, err := strconv.ParseInt(fmt.Sprint(microseconds), 10, 64)
	return time.Unix(sec, usec*1000), err
}

// observe feeds a TIME reply to the clock estimator.
func (g *Guard) observe(cmd *redis.TimeCmd, sent, received time.Time) error {
	at, err := cmd.Result()
	if err != nil {
		return fmt.Errorf("redlock: TIME (the guard's clock reading): %w", reply.Denied("TIME", err))
	}
	g.record(drift.Reading{Sent: sent, Received: received, Node: at})
	return nil
}

// record feeds a reading of the node's clock to its estimator; a forward
// jump starts a quarantine.
func (g *Guard) record(r drift.Reading) {
	jump, jumped := g.clock.Observe(r)
	if jumped && jump.Size > 0 {
		g.mu.Lock()
		maxTTL := g.quarantineTTL()
		g.jumpEnd, g.jumpSize = g.now.Now().Add(drift.Add(maxTTL, g.bound.Of(maxTTL))), jump.Size
		g.mu.Unlock()
	}
}

// existsError is the error of a failed SCRIPT EXISTS of the guard's: a
// named ErrNoPermission when the ACL refused it.
func existsError(err error) error {
	const what = "SCRIPT EXISTS (the guard's check for a new server process)"
	if reply.DeniedByACL(err) {
		return reply.Denied(what, err)
	}
	return fmt.Errorf("redlock: %s: %w", what, err)
}

// timeOf reads a TIME reply that came as a generic Cmd: [seconds,
// microseconds].
func timeOf(cmd *redis.Cmd) (time.Time, error) {
	res, err := cmd.StringSlice()
	if err != nil {
		return time.Time{}, err
	}
	if len(res) == 2 {
		if at, err := timeOfReply(res[0], res[1]); err == nil {
			return at, nil
		}
	}
	return time.Time{}, fmt.Errorf("redlock: unexpected TIME reply %v", res)
}

// drop forgets every examined state: the map and its lock-free copy of the
// standalone marker's state together, so that the two never disagree.
func (g *Guard) drop() {
	g.mu.Lock()
	clear(g.memory)
	g.standalone.Store(nil)
	g.mu.Unlock()
}
