package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/fence"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/redlock"
)

// The simulation runs the real Locker, the real workload, nemesis and
// referee (workload.go, nemesis.go, referee.go) against simulated nodes
// (simnode.go) inside a testing/synctest bubble: every sleep, timer,
// deadline and TTL runs on the bubble's virtual clock, which moves only
// when every goroutine in the bubble is blocked. A 30 s schedule takes a
// few hundred milliseconds of CPU instead of 30 s.
//
// What it does not cover (docs/failure-models.md, "Simulation in virtual
// time", has the whole list): the servers are miniredis, not Redis (their
// INFO is the simulation's own, simnode.go; scripts run in gopher-lua);
// the network is in-process pipes, not TCP (no partial writes, no kernel
// buffers); the resource is never faulted and is a Redis counter (not the
// SQL table); and the interleaving of goroutines is the Go scheduler's, not
// fixed by the seed (see replay in simrun.go).

// simDeployment is the simulated lock nodes and the resource's server,
// which no fault touches.
type simDeployment struct {
	cfg      config
	nodes    []*simNode
	resource *miniredis.Miniredis
	clocks   []*stallClock // each Locker's
}

var (
	_ target  = (*simDeployment)(nil)
	_ staller = (*simDeployment)(nil)
)

// stall makes the next clock reading of client f.Client's Locker late.
func (d *simDeployment) stall(f *fault) error {
	return d.clocks[f.Client%len(d.clocks)].arm(f)
}

// stallClock is a Locker's clock in the simulation: the bubble's, except
// that after a stall fault one of its next readings inside an attempt
// (Locker.attempt: the reading before the first send, or the one after the
// quorum's decision, the validity check's) waits the fault's length first,
// as if the process had been paused there (a GC, the scheduler, a stalled
// VM). Only readings in an attempt: others are taken under the Locker's
// mutexes, and a goroutine waiting on a mutex is not durably blocked in a
// bubble, so a stall there would stop the bubble's clock. Only the
// goroutine reading the clock waits; a real pause stops the others too.
type stallClock struct {
	mu      sync.Mutex
	pending *fault
	skip    int       // attempt readings to let by before the pending stall
	start   time.Time // the run's, to date the fault
}

var _ clock.Clock = (*stallClock)(nil)

// attemptFunc is the function whose clock readings a stall may fall on.
const attemptFunc = "github.com/redlock/redlock/redlock.(*Locker).attempt"

// inAttempt says whether the clock is being read by Locker.attempt itself.
func inAttempt() bool {
	pc, _, _, ok := runtime.Caller(2) // Now's caller
	return ok && runtime.FuncForPC(pc).Name() == attemptFunc
}

// dateFrom dates stalls from start, the run's.
func (c *stallClock) dateFrom(start time.Time) {
	c.mu.Lock()
	c.start = start
	c.mu.Unlock()
}

func (c *stallClock) arm(f *fault) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending != nil {
		return errors.New("the Locker has a stall pending")
	}
	c.pending, c.skip = f, max(f.Reading-1, 0)
	return nil
}

func (c *stallClock) Now() time.Time {
	c.mu.Lock()
	f := c.pending
	switch {
	case f == nil:
	case !inAttempt():
		f = nil
	case c.skip > 0:
		c.skip--
		f = nil
	case f != nil:
		c.pending = nil
		f.Began = time.Since(c.start)
	}
	start := c.start
	c.mu.Unlock()
	if f != nil {
		time.Sleep(f.For)
		c.mu.Lock()
		f.Ended = time.Since(start)
		c.mu.Unlock()
	}
	return time.Now()
}

// simServer names the simulated servers in reports.
const simServer = "simulated (miniredis " + miniredisVersion + " in virtual time)"

// miniredisVersion is the miniredis the simulation runs (go.mod's).
const miniredisVersion = "v2.40.0"

func newSimDeployment(cfg config) *simDeployment {
	rng := rand.New(rand.NewPCG(cfg.seed, 0x636c6f636b73))
	d := &simDeployment{cfg: cfg, resource: miniredis.NewMiniRedis()}
	for i := range cfg.nodes {
		// Each node's clock is off the others' by up to a minute: Redis
		// expires keys by its own wall clock, and the library must never
		// compare one node's clock with another's.
		offset := time.Duration(rng.Int64N(int64(2*time.Minute))) - time.Minute
		replicas := 0
		if slices.Contains(cfg.faults, "failover") {
			replicas = 1
		}
		// Nodes that evict run with an eviction policy from the start, as
		// a node configured so does: the guard reads the policy when it
		// examines a node, and watches evictions from then on. (A policy
		// switched on at run time is seen at the node's next examination,
		// not before: see docs/failure-models.md.)
		mayEvict := slices.Contains(cfg.faults, "evict") || slices.Contains(cfg.faults, "pressure")
		d.nodes = append(d.nodes, newSimNode(i, newNodeClock(offset), cfg.seed, replicas, mayEvict))
	}
	return d
}

// strike carries out a node's fault on simulated node i.
func (d *simDeployment) strike(ctx context.Context, f *fault, i int) error {
	n := d.nodes[i]
	hold := func() { time.Sleep(f.For) }
	switch nodeFault[f.Kind] {
	case "freeze":
		n.freeze()
		hold()
		n.thaw()
	case "kill": // and outage
		n.kill()
		hold()
		n.restart(nil, false)
	case "snapshot", "failover":
		// A rollback restarts from the last SAVE; a failover promotes a
		// replica that stopped hearing its primary when the fault began,
		// while the primary went on granting. To the clients both are a
		// new server process holding the node's memory as of the fault's
		// start (less what expired since, by the node's clock); to the
		// guard the second continues the primary's replication history
		// and read a stream (its INFO says so).
		snap := n.save()
		hold()
		n.kill()
		n.restart(snap, nodeFault[f.Kind] == "failover")
	case "partition":
		n.partition(true)
		hold()
		n.partition(false)
	case "blackhole":
		n.setBlackhole(true)
		hold()
		n.setBlackhole(false)
	case "latency":
		n.setDelay(d.cfg.ttl / 3)
		hold()
		n.setDelay(0)
	case "lostreply":
		n.setLoss(0.5)
		hold()
		n.setLoss(0)
	case "scriptflush":
		n.flushScripts()
	case "flush": // and amnesia
		n.server().FlushAll()
	case "evict": // and pressure: a key evicted every twentieth of a TTL
		every := d.cfg.ttl / 20
		for end := time.Now().Add(f.For); time.Now().Before(end); time.Sleep(every) {
			n.evictOne()
		}
	case "clockjump":
		n.clock.step(f.Step)
	case "clockrate":
		n.clock.setRate(f.Rate)
		hold()
		n.clock.setRate(1)
	default:
		return fmt.Errorf("unknown fault %q", f.Kind)
	}
	return nil
}

// simulate runs one schedule on simulated nodes in a synctest bubble of
// t's, then judges it (porcupine outside the bubble: its search is work,
// not waiting, and its time bound must be the wall clock's).
func simulate(t *testing.T, cfg config) (res *result, err error) {
	var hist *history
	var final []int64
	synctest.Test(t, func(t *testing.T) {
		res, hist, final, err = simulateInBubble(t.Context(), cfg)
	})
	if err != nil {
		return nil, err
	}
	return res, res.conclude(cfg, hist, final)
}

// simulateInBubble is the schedule's run, inside the bubble.
func simulateInBubble(ctx context.Context, cfg config) (*result, *history, []int64, error) {
	d := newSimDeployment(cfg)
	var clients []*redis.Client
	defer func() {
		// Every goroutine started in the bubble must end in it: go-redis's
		// are the clients'.
		for _, c := range clients {
			c.Close()
		}
		for _, n := range d.nodes {
			n.kill()
		}
		d.resource.Close()
	}()
	rc := redis.NewClient(redistest.BubbleOptions("127.0.2.1:6379", d.resource.Dial, -1))
	clients = append(clients, rc)
	store := &resources{kind: "redis", redis: &redisResource{client: rc}}
	if cfg.safe && !cfg.sim.noFencing {
		store.redis.guard = fence.NewRedis(rc)
	}
	// A Lock call's head of the line polls every RetryDelay+jitter even
	// with wake-ups (they bring it in at once; polling is the safety net):
	// with the defaults (25ms, 50ms) three waiters made some sixteen
	// attempts per lease, each a script on every node, which miniredis runs
	// in a new Lua state. Eight times the defaults keeps the hand-offs the
	// wake-ups' and makes the simulation about three times cheaper.
	opts := &redlock.Options{MaxTTL: cfg.ttl, NodeTimeout: 100 * time.Millisecond, NoAutoPipeline: cfg.sim.direct,
		RetryDelay: 200 * time.Millisecond, RetryJitter: 400 * time.Millisecond}
	if cfg.safe {
		opts.Fencing = !cfg.sim.noFencing
		opts.NoQuarantine = cfg.sim.noQuarantine
	} else {
		opts.NoQuarantine = true
	}
	if cfg.sim.hooks.Any() {
		unsafelocker.Set(opts, cfg.sim.hooks)
	}
	retries := -1 // a lost reply is the Locker's to judge
	if cfg.sim.retries {
		retries = 2 // go-redis sends a command again after its reply was lost
	}
	lockers := make([]*redlock.Locker, cfg.lockers)
	for i := range lockers {
		clk := &stallClock{}
		d.clocks = append(d.clocks, clk)
		o := *opts
		o.Clock = clk
		var nodes []redlock.Node
		for _, n := range d.nodes {
			// The address names the node (Lockers tell nodes apart by
			// it); nothing listens there.
			c := redis.NewClient(redistest.BubbleOptions(fmt.Sprintf("127.0.1.%d:6379", n.id+1), n.dial, retries))
			clients = append(clients, c)
			nodes = append(nodes, c)
		}
		var err error
		if lockers[i], err = redlock.New(nodes, &o); err != nil {
			return nil, nil, nil, err
		}
		if err := lockers[i].TrustNodes(ctx); err != nil {
			return nil, nil, nil, fmt.Errorf("TrustNodes: %w", err)
		}
	}
	faults := plan(cfg)
	for _, c := range d.clocks {
		c.dateFrom(time.Now()) // exercise's start: it reads the clock next
	}
	// The clients go on for a quiet spell of three TTLs after the last
	// fault could have ended (faults start by cfg.duration - TTL and last
	// at most two TTLs): by its end every key from the faulty part has
	// expired, and every key set in it has been released.
	run := cfg
	run.duration += 3 * cfg.ttl
	hist, ran, err := exercise(ctx, run, lockers, store, d, faults)
	if err != nil {
		return nil, nil, nil, err
	}
	res := judge(cfg, simServer, faults, hist, ran)
	res.Counts.KeysAtEnd = countLockKeys(d, cfg)
	// Every key a lease set expires within a TTL of its last write.
	time.Sleep(2 * cfg.ttl)
	res.Counts.KeysLeft = countLockKeys(d, cfg)
	final := make([]int64, cfg.keys)
	for k := range final {
		if v, err := d.resource.Get(counterName(k)); err == nil {
			fmt.Sscan(v, &final[k])
		}
	}
	return res, hist, final, nil
}

// countLockKeys counts the lock keys on every node.
func countLockKeys(d *simDeployment, cfg config) int {
	n := 0
	for _, node := range d.nodes {
		m := node.server()
		for k := range cfg.keys {
			if m.Exists(lockName(k)) {
				n++
			}
		}
	}
	return n
}
