package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/internal/hashtag"
)

// The node guard checks Redlock's two assumptions about each node on the
// hot path, instead of trusting the operator with them:
//
//   - A node does not come back having forgotten keys it granted (a restart
//     without persistence, a FLUSHALL, an RDB snapshot older than its last
//     grants). Such a node could grant a held lock a second time. The Redis
//     documentation's remedy is to keep it out of the quorum for longer than
//     the longest TTL; the guard enforces it: each node keeps a marker of
//     when its current memory began, and while less than Options.MaxTTL has
//     passed since then the node's votes do not count.
//   - A node's clock does not jump forward (Redis expires keys by its wall
//     clock, so a forward jump drops held keys early there). Every guarded
//     round trip reads the node's clock; a drift.Estimator per node turns
//     the readings into a clock rate and jumps. After a forward jump the node's
//     votes do not count for MaxTTL (its keys from before the jump may be
//     gone early); a node measured to run faster than the drift bound
//     shortens the validity of leases it grants.
//
// Such a node's vote fails with ErrNodeQuarantined, never contention.
//
// Cost: the commands that need the guard (acquisitions, extensions, checks)
// travel with companions in the same pipeline, behind them on the same
// connection. On a standalone Redis (7.0 on) or Valkey node there is one:
// PTTL of the marker. The marker has an absolute expiry a century or two
// ahead, random, and every write of it moves it; so its PTTL says that the
// marker is there (-2: missing), that it is the one examined (another
// expiry reads as a clock years off), and the node's clock: the expiry
// minus the PTTL, in milliseconds, the very clock by which the node expires
// keys. Elsewhere (a server that does not say its uptime, as miniredis,
// whose TTLs need not follow its TIME; one without PEXPIRETIME; a cluster
// node) the companions are GET of the marker and TIME (not on a cluster
// node). SCRIPT EXISTS joins them in every guarded batch: of the copy of
// the examine script whose run examined the marker, which only the server
// process where it ran has cached, so that a new process (which may have
// loaded an old snapshot, marker and all) is examined before its votes
// count, however the node is reached (see proof.go). The auto-pipeline sends
// one set per batch, however many commands the batch carries.
//
// The decision is the client's: the lock commands stay plain SET NX and the
// short scripts, and no Lua runs in the steady state (Lua costs a node
// several times what a SET does). The client examines a node (examine.lua:
// INFO, then the marker is written where it is missing) only when the
// companions say something changed: the marker is missing (a restart
// without persistence, a flush, an eviction, a first use) or differs from
// the one it examined last (its value, or its expiry: a clock reading that
// does not fit the node's clock so far is examined too, and the
// examination's TIME tells a jump from a rewritten marker), or the examine
// script copy that examined it is no longer cached on the node (a new
// server process, which may have loaded an old snapshot), or this Locker
// has not examined the node yet.
//
// Order matters: the companions follow the guarded commands on one
// connection, so a marker read intact after a SET proves that the memory
// the SET found had not been flushed, and a flush after the marker's read
// is the next round trip's to see.
//
// Where the marker lives: one key per node ("redlock:memory") on every node
// but a Redis Cluster, whose masters restart separately: there, one marker
// per hash slot ("redlock:memory:{tag}", in the lock key's slot), read with
// its own GET, so that a lock key whose slot is migrating needs no
// multi-key command (which the cluster refuses with TRYAGAIN mid-migration).
// A cluster node's clock is not measured: its slot's master changes with
// failovers, and so would the clock.

// ErrNodeQuarantined matches the vote of a node that the guard keeps out of
// the quorum for now: its memory began less than Options.MaxTTL ago, so a
// key it granted before may still be held by someone, or its clock jumped
// forward less than MaxTTL ago, so a key it granted before the jump may have
// expired early. The *QuorumError names the node, the cause and how long is
// left.
var ErrNodeQuarantined = errors.New("redlock: node quarantined")

// quarantineError is a quarantined node's vote.
type quarantineError struct {
	left  time.Duration
	cause string
}

func (e *quarantineError) Error() string {
	if e.left <= 0 {
		return fmt.Sprintf("%v for this round trip: %s", ErrNodeQuarantined, e.cause)
	}
	return fmt.Sprintf("%v for %v more: %s", ErrNodeQuarantined, e.left.Round(time.Millisecond), e.cause)
}

func (e *quarantineError) Is(target error) bool { return target == ErrNodeQuarantined }

// What a quarantine says of its cause.
const (
	memoryCause = "its memory began less than MaxTTL ago (a restart without persistence, a flush, an eviction, a failover to a replica that may lack grants because not every replica was waited for, or a first use; Locker.TrustNodes lifts it for a deployment known to hold no locks)"
	jumpCause   = "its clock jumped forward by %v less than MaxTTL ago, so keys it granted before may have expired early"
)

var (
	//go:embed scripts/examine.lua
	examineLua    string
	examineScript = newScript("guard's examine", "TIME, GET, SET, INFO, PEXPIRETIME, PTTL", examineLua)

	//go:embed scripts/trust.lua
	trustLua    string
	trustScript = newScript("trust", "GET, SET, INFO", trustLua)
)

// markerExpiry returns a new absolute expiry for a standalone node's marker,
// in Unix milliseconds: a random instant 100 to 200 years ahead. Random, so
// that no two writes of the marker share one and the expiry names the
// marker; that far ahead, so that it never expires in earnest (a clock that
// leaps a century ahead loses it, and the guard sees a missing marker).
func markerExpiry() int64 {
	const century = 100 * 365 * 24 * time.Hour
	return time.Now().Add(century + rand.N(century)).UnixMilli()
}

// expiryAgreement is how closely a node's key expiry must follow its TIME
// for the guard to read the node's clock through the marker's PTTL: within
// one script, with PTTL in whole milliseconds. A server whose
// TTLs do not run by its clock (miniredis without ClockTTL) disagrees by
// more as soon as its marker ages, and is read by TIME.
const expiryAgreement = 5 * time.Millisecond

// markerKey is the guard's marker on every node but a Redis Cluster.
const markerKey = "redlock:memory"

// slotMarker is the marker of a hash slot on a Redis Cluster.
func slotMarker(slot int) string {
	return markerKey + ":{" + hashtag.TagFor(slot) + "}"
}

// guard is one node's guard, shared by both transports. Nil on a Locker
// with Options.NoQuarantine.
type guard struct {
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

	mu       sync.Mutex
	memory   map[string]memoryState // by marker key
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

func newGuard(o *Options, cluster bool, declared *atomic.Int64) *guard {
	g := &guard{maxTTL: o.MaxTTL, waitReplicas: o.WaitReplicas, bound: o.bound(), now: o.Clock, cluster: cluster, declared: declared, memory: map[string]memoryState{}}
	if !cluster {
		g.clock = drift.NewEstimator(g.bound)
	}
	return g
}

// markerFor returns the marker that covers key on this node.
func (g *guard) markerFor(key string) string {
	if g.cluster {
		return slotMarker(hashtag.Slot(key))
	}
	return markerKey
}

// companions are the guard's commands that follow guarded commands in one
// pipeline: PTTL of the marker (pttl), or GET of the marker and TIME; and
// SCRIPT EXISTS of the copy of the examine script that proved the marker's
// state (see proof.go).
type companions struct {
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
	// unprovenExistsArgs asks of the examine script itself, no copy's proof.
	unprovenExistsArgs = []any{"script", "exists", examineScript.Hash()}
)

func (g *guard) companions(ctx context.Context, marker string) companions {
	c := companions{marker: marker}
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
func (c *companions) lacks(watch, evicts bool) bool {
	return watch && c.replication == nil || evicts && c.evictions == nil
}

// needs says which optional companions a batch judged by state must carry:
// the replication companion, where every grant reaches every replica and
// stays so only while the node's replicas are watched (see failover.go),
// and the eviction companion, where the node may evict (see eviction.go).
func (g *guard) needs(state memoryState) (watch, evicts bool) {
	return g.waitReplicas > 0 && state.history.covered(), state.evicts
}

// appendTo appends the companions to cmds, in the order they are sent.
func (c *companions) appendTo(cmds []redis.Cmder) []redis.Cmder {
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
// quarantineError, or the error that kept the guard from deciding (which
// fails those votes too: a guard that cannot look must not pass). It
// examines the node through ex when the companions say so, or when suspect
// (a command in the round trip met NOSCRIPT: a new server process).
func (g *guard) judge(ctx context.Context, ex redis.Scripter, c companions, sent, received time.Time, suspect bool) error {
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
		case deniedByACL(err):
			return denied(fmt.Sprintf("GET of the guard's marker %q", c.marker), err)
		case err != nil:
			if _, _, redirected := redirection(err); !redirected {
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
func (g *guard) readExpiry(c companions, sent, received time.Time) (same bool, err error) {
	left, err := c.pttl.Result()
	switch {
	case deniedByACL(err):
		return false, denied(fmt.Sprintf("PTTL of the guard's marker %q", c.marker), err)
	case err != nil:
		return false, fmt.Errorf("redlock: PTTL of the guard's marker %q: %w", c.marker, err)
	case left < 0:
		return false, nil
	}
	r := drift.Reading{Sent: sent, Received: received, Node: time.UnixMilli(c.expiry - left), Resolution: time.Millisecond}
	return g.clock.ObserveIfFits(r), nil
}

// verdict is the quarantine that state and the last jump impose now, if any.
func (g *guard) verdict(state memoryState) error {
	return g.verdictAt(state, g.now.Now())
}

func (g *guard) verdictAt(state memoryState, now time.Time) error {
	g.mu.Lock()
	jumpEnd, jumpSize := g.jumpEnd, g.jumpSize
	g.mu.Unlock()
	memoryLeft, jumpLeft := g.clearAt(state).Sub(now), jumpEnd.Sub(now)
	switch {
	case memoryLeft <= 0 && jumpLeft <= 0:
		return nil
	case jumpLeft > memoryLeft:
		return &quarantineError{left: jumpLeft, cause: fmt.Sprintf(jumpCause, jumpSize)}
	}
	return &quarantineError{left: memoryLeft, cause: memoryCause}
}

// examine runs examine.lua on the node through ex and records what it
// found: when the node's memory began, in this process's time.
//
// weakened reports that the examination took back the marker's word that
// every grant reaches every replica (see failover.go): a grant that went
// before it on the node must not count.
func (g *guard) examine(ctx context.Context, ex redis.Scripter, marker string) (_ memoryState, weakened bool, _ error) {
	seq := g.examSeq.Add(1)
	sent := time.Now()
	res, proof, err := g.examined.run(ctx, ex, marker, markerExpiry(), g.quarantineTTL().Milliseconds(), g.waitReplicas)
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
		return memoryState{}, false, fmt.Errorf("redlock: the guard's examine script (it calls %s on %s): %w", examineScript.calls, marker, denied("the guard's examine script", err))
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
		g.memory[marker] = state
		if g.clock != nil {
			g.expiry.Store(state.expiry)
		}
		if marker == markerKey {
			g.standalone.Store(&state)
		}
	}
	g.mu.Unlock()
	return state, weakened, nil
}

// clearAt is when state's memory has been whole for the quarantine's
// length: MaxTTL, the longest this Locker knows of now (a longer one
// learned since the examination counts), after the memory began. The
// node's keys expire by its clock, which may run slow: the drift bound on
// what was left is allowed on top. Zero: a state never examined.
func (g *guard) clearAt(state memoryState) time.Time {
	if state.examinedAt.IsZero() {
		return time.Time{}
	}
	left := g.quarantineTTL() - state.age
	if left <= 0 {
		return state.examinedAt
	}
	return state.examinedAt.Add(left + g.bound.Of(left))
}

// markerFields is a marker's content (see examine.lua).
type markerFields struct {
	began    int64         // when the memory began (Unix ms, the node's clock)
	declared time.Duration // the longest MaxTTL a Locker declared (0: none said)
	history  history
	evicted  int64 // keys the process had evicted when it was written (-1: not said)
}

// parseMarker reads a marker, "<began> <run_id> <maxttl> <replid> <fed>
// <wait> <replicas> <evicted>", or one written by earlier versions, with
// only the first two or three fields (no history: never covered).
func parseMarker(value string) (markerFields, error) {
	m := markerFields{evicted: -1}
	f := strings.Fields(value)
	if len(f) != 2 && len(f) != 3 && len(f) != 8 {
		return m, fmt.Errorf("holds %q, not \"<ms> <run_id> <maxttl ms> <replid> <fed> <wait> <replicas> <evicted>\"", value)
	}
	var err error
	if m.began, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return m, fmt.Errorf("holds %q, whose first field is not a time in ms", value)
	}
	if len(f) >= 3 {
		ms, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return m, fmt.Errorf("holds %q, whose MaxTTL field is not in ms", value)
		}
		m.declared = time.Duration(ms) * time.Millisecond
	}
	if len(f) == 8 {
		if m.history, err = parseHistory(f[3], f[5], f[6]); err != nil {
			return m, fmt.Errorf("holds %q: %w", value, err)
		}
		if m.evicted, err = strconv.ParseInt(f[7], 10, 64); err != nil || m.evicted < 0 {
			return m, fmt.Errorf("holds %q, whose evicted field is not a count", value)
		}
	}
	return m, nil
}

// learn records the longest MaxTTL a Locker declared on the node, and
// returns the longer of it and this Locker's own: the quarantine's length.
// Every Locker of a deployment must quarantine as long as the longest lease
// any of them grants, and the marker tells them (see examine.lua).
func (g *guard) learn(declared time.Duration) time.Duration {
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
func (g *guard) quarantineTTL() time.Duration {
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
func (g *guard) observe(cmd *redis.TimeCmd, sent, received time.Time) error {
	at, err := cmd.Result()
	if err != nil {
		return fmt.Errorf("redlock: TIME (the guard's clock reading): %w", denied("TIME", err))
	}
	g.record(drift.Reading{Sent: sent, Received: received, Node: at})
	return nil
}

// record feeds a reading of the node's clock to its estimator; a forward
// jump starts a quarantine.
func (g *guard) record(r drift.Reading) {
	jump, jumped := g.clock.Observe(r)
	if jumped && jump.Size > 0 {
		g.mu.Lock()
		maxTTL := g.quarantineTTL()
		g.jumpEnd, g.jumpSize = g.now.Now().Add(maxTTL+g.bound.Of(maxTTL)), jump.Size
		g.mu.Unlock()
	}
}

// existsError is the error of a failed SCRIPT EXISTS of the guard's: a
// named ErrNoPermission when the ACL refused it.
func existsError(err error) error {
	const what = "SCRIPT EXISTS (the guard's check for a new server process)"
	if deniedByACL(err) {
		return denied(what, err)
	}
	return fmt.Errorf("redlock: %s: %w", what, err)
}

// guardedVote is a node's vote on a guarded command: a grant fails when the
// guard's verdict is not nil (a quarantine, or an error that kept the guard
// from deciding). A refusal stays what it is: another value on the key is
// contention however the node's memory began. Both transports decide such
// votes here.
func guardedVote(o Outcome, err, verdict error) (Outcome, error) {
	if verdict != nil && err == nil && o == Granted {
		return Failed, verdict
	}
	return o, err
}

// TrustNodes declares every node's current memory complete: a new
// deployment known to hold no locks, or nodes whose data the operator knows
// to be whole. It lifts the guard's quarantine for each node's current
// server process, for every Locker; a later restart without persistence, or
// a flush, is caught again. On a Redis Cluster node it marks every hash
// slot, through the masters that serve them. It does not lift a quarantine
// for a clock jump. It returns every node's error, after trying them all.
func (l *Locker) TrustNodes(ctx context.Context) error {
	if l == nil {
		return errors.New("redlock: TrustNodes on a nil *Locker")
	}
	if ctx == nil {
		return errors.New("redlock: TrustNodes: nil context")
	}
	errs := make([]error, len(l.nodes))
	var wg sync.WaitGroup
	for i, n := range l.nodes {
		wg.Go(func() {
			if err := n.trust(ctx, l.opts.MaxTTL, l.opts.WaitReplicas); err != nil {
				errs[i] = fmt.Errorf("redlock: TrustNodes: %s: %w", n.name, denied("the trust script (it calls "+trustScript.calls+")", err))
				return
			}
			if n.guard != nil {
				errs[i] = n.guard.forget(ctx, n.Node)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// forget drops what this guard examined, which TrustNodes made stale: a
// standalone node is examined again at once, a cluster node's slots on
// their next use.
func (g *guard) forget(ctx context.Context, ex redis.Scripter) error {
	g.drop()
	if g.cluster {
		return nil
	}
	_, _, err := g.examine(ctx, ex, markerKey)
	return err
}

// demoted drops what this guard examined on a node that answered
// READONLY: a replica now, whose memory a full resync may replace with
// another primary's while its process, script cache and marker value stay
// (a resync can bring the very marker back, expiry and all). Should it be
// promoted again, the next batch examines it, and finds that it read from a
// primary since.
func (g *guard) demoted() { g.drop() }

// drop forgets every examined state: the map and its lock-free copy of the
// standalone marker's state together, so that the two never disagree.
func (g *guard) drop() {
	g.mu.Lock()
	clear(g.memory)
	g.standalone.Store(nil)
	g.mu.Unlock()
}

func (n node) trust(ctx context.Context, maxTTL time.Duration, waitReplicas int) error {
	cc, ok := n.Node.(*redis.ClusterClient)
	if !ok {
		return trustScript.Run(ctx, n.Node, []string{markerKey}, markerExpiry(), maxTTL.Milliseconds(), waitReplicas).Err()
	}
	// Every slot's marker, written on the master that serves it, with that
	// master's run_id: plain SETs, in one pipeline per master (16,384
	// scripts would cost far more than the INFO per master this needs).
	masters := map[string]*redis.Client{}
	var mu sync.Mutex
	if err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		masters[c.Options().Addr] = c
		mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	ranges, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		m, ok := masters[r.Nodes[0].Addr]
		if !ok {
			return fmt.Errorf("the master %s of slots %d-%d is not one the client knows", r.Nodes[0].Addr, r.Start, r.End)
		}
		p := processOf(ctx, m)
		if id, err := m.Do(ctx, "CLUSTER", "MYID").Text(); err == nil && id != "" {
			p.run += "@" + id // as examine.lua names a cluster node
		}
		marker := fmt.Sprintf("0 %s %d %s %d %d %d %d", p.run, maxTTL.Milliseconds(), p.replid, p.fed, waitReplicas, p.replicas, p.evicted)
		if _, err := m.Pipelined(ctx, func(p redis.Pipeliner) error {
			for slot := r.Start; slot <= r.End; slot++ {
				p.Set(ctx, slotMarker(int(slot)), marker, 0)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// process is what a marker says of a server process: its run_id,
// master_replid, the bytes it read from a primary, its replicas, and the
// keys it evicted ("?" and 0 where the server does not say).
type process struct {
	run, replid  string
	fed, evicted int64
	replicas     int
}

// processOf reads a master's process as examine.lua reads it.
func processOf(ctx context.Context, c *redis.Client) process {
	info, err := c.Info(ctx, "server", "replication", "stats").Result()
	f := infoFields(info)
	p := process{run: f["run_id"], replid: f["master_replid"]}
	if err != nil || p.run == "" {
		p.run = "?"
	}
	if err != nil || p.replid == "" {
		p.replid = "?"
	}
	p.fed, _ = strconv.ParseInt(f["total_net_repl_input_bytes"], 10, 64)
	p.evicted, _ = strconv.ParseInt(f["evicted_keys"], 10, 64)
	p.replicas, _ = strconv.Atoi(f["connected_slaves"])
	return p
}
