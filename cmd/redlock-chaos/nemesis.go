package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// fault is one of the nemesis's faults: planned from the seed (Kind, At,
// For, Node or Client), then carried out, with when it really began and
// ended (a fault waits for the previous one on its node to end).
type fault struct {
	Kind   string        `json:"kind"`
	At     time.Duration `json:"at"`              // planned start, from the run's start
	For    time.Duration `json:"for"`             // planned length; 0 for an instant fault
	Node   int           `json:"node"`            // -1: a client's fault, or an outage's
	Nodes  []int         `json:"nodes,omitempty"` // an outage's
	Client int           `json:"client"`          // -1: a node's fault
	Step   time.Duration `json:"step,omitempty"`  // a clockjump's step forward
	Began  time.Duration `json:"began"`           // carried out
	Ended  time.Duration `json:"ended"`
	Err    string        `json:"err,omitempty"`
}

func (f fault) String() string {
	who := "node " + strconv.Itoa(f.Node)
	switch {
	case len(f.Nodes) > 0:
		who = "nodes " + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(f.Nodes)), ","), "[]")
	case f.Node < 0:
		who = "client " + strconv.Itoa(f.Client)
	}
	s := fmt.Sprintf("%8s  %-11s %-9s", f.At.Round(time.Millisecond), f.Kind, who)
	if f.For > 0 {
		s += " for " + f.For.Round(time.Millisecond).String()
	}
	if f.Step > 0 {
		s += " +" + f.Step.Round(time.Millisecond).String()
	}
	if f.Err != "" {
		s += "  (" + f.Err + ")"
	}
	return s
}

// instant faults have no length.
func instant(kind string) bool {
	return kind == "scriptflush" || kind == "flush" || kind == "amnesia" || kind == "clockjump"
}

// nodeFault is what each kind of fault does to a node it strikes. The
// faults that strike a majority at once (outage, amnesia, rollback,
// pressure, clockjump, failover: the ones a Redlock without its node guard
// does not survive) do a single node's fault to each of theirs; the others
// strike one node, which the majority outvotes.
var nodeFault = map[string]string{
	"freeze": "freeze", "kill": "kill", "snapshot": "snapshot", "partition": "partition", "blackhole": "blackhole",
	"latency": "latency", "scriptflush": "scriptflush", "flush": "flush", "evict": "evict",
	"outage": "kill", "amnesia": "flush", "rollback": "snapshot", "pressure": "evict",
	"clockjump": "clockjump", "failover": "failover",
}

// onMajority says whether a kind of fault strikes a majority at once.
func onMajority(kind string) bool {
	switch kind {
	case "outage", "amnesia", "rollback", "pressure", "clockjump", "failover":
		return true
	}
	return false
}

// plan draws the fault schedule from the seed alone: the same seed and flags
// give the same schedule.
func plan(cfg config) []fault {
	if len(cfg.faults) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 0x6e656d65736973))
	var out []fault
	at := time.Duration(0)
	for {
		at += time.Duration(rng.ExpFloat64() * float64(cfg.faultEvery))
		if at > cfg.duration-cfg.ttl {
			return out
		}
		f := fault{Kind: cfg.faults[rng.IntN(len(cfg.faults))], At: at, Node: -1, Client: -1}
		if onMajority(f.Kind) {
			f.Nodes = rng.Perm(cfg.nodes)[:cfg.nodes/2+1]
			slices.Sort(f.Nodes)
		}
		switch {
		case f.Kind == "pause":
			// Longer than any lease's validity: the paused holder writes
			// after its lease ended, and another may have taken it.
			f.Client, f.For = rng.IntN(cfg.clients), cfg.ttl*3/2
		case f.Kind == "amnesia":
			// Every key lost at once, with no downtime: the outage
			// without its restart time, so that a holder is surely still
			// inside its lease.
		case f.Kind == "outage":
			// Crashed and restarted at once by a supervisor, with no
			// persistence: back within tens of milliseconds, well inside
			// a lease.
			f.For = cfg.ttl/50 + time.Duration(rng.Int64N(int64(cfg.ttl/25)))
		case f.Kind == "clockjump":
			// Wall clocks stepped forward by one to two TTLs at once (an
			// NTP step after a long drift, an operator's date -s): every
			// key they hold expires early.
			f.Step = cfg.ttl + time.Duration(rng.Int64N(int64(cfg.ttl)))
		case onMajority(f.Kind): // rollback, pressure, failover
			f.For = cfg.ttl/4 + time.Duration(rng.Int64N(int64(cfg.ttl/2)))
		case instant(f.Kind):
			f.Node = rng.IntN(cfg.nodes)
		default:
			f.Node, f.For = rng.IntN(cfg.nodes), cfg.ttl/2+time.Duration(rng.Int64N(int64(cfg.ttl*3/2)))
		}
		out = append(out, f)
	}
}

// nemesis carries out a schedule on a deployment and on the clients.
type nemesis struct {
	d      *deployment
	cfg    config
	start  time.Time
	pauses []chan *fault // one per client: a pause to take before its next write, which it dates
	nodeMu []sync.Mutex  // one fault at a time per node
}

func newNemesis(d *deployment, cfg config, start time.Time) *nemesis {
	n := &nemesis{d: d, cfg: cfg, start: start, pauses: make([]chan *fault, cfg.clients), nodeMu: make([]sync.Mutex, cfg.nodes)}
	for i := range n.pauses {
		n.pauses[i] = make(chan *fault, 1)
	}
	return n
}

// run carries out every fault at its time and returns once all have ended
// (every node healed), or early faults undone when ctx ends.
func (n *nemesis) run(ctx context.Context, faults []fault) {
	var wg sync.WaitGroup
	for i := range faults {
		wg.Go(func() {
			f := &faults[i]
			select {
			case <-time.After(time.Until(n.start.Add(f.At))):
			case <-ctx.Done():
				f.Err = "not carried out: the run ended"
				f.Began, f.Ended = -1, -1
				return
			}
			if err := n.carryOut(ctx, f); err != nil {
				f.Err = err.Error()
			}
		})
	}
	wg.Wait()
}

func (n *nemesis) since() time.Duration { return time.Since(n.start) }

func (n *nemesis) carryOut(ctx context.Context, f *fault) error {
	if f.Kind == "pause" {
		f.Began, f.Ended = -1, -1 // until the client takes it
		select {
		case n.pauses[f.Client] <- f:
		default:
			return fmt.Errorf("client %d has a pause pending", f.Client)
		}
		return nil
	}
	if onMajority(f.Kind) {
		// A majority fault is its node's fault on each of the nodes at
		// once.
		defer n.holdNodes(f)()
		errs := make([]error, len(f.Nodes))
		var wg sync.WaitGroup
		for j, i := range f.Nodes {
			wg.Go(func() { errs[j] = n.onNode(ctx, f, i) })
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	n.nodeMu[f.Node].Lock()
	defer n.nodeMu[f.Node].Unlock()
	f.Began = n.since()
	defer func() { f.Ended = n.since() }()
	return n.onNode(ctx, f, f.Node)
}

// onNode carries out a node's fault on node i.
func (n *nemesis) onNode(ctx context.Context, f *fault, i int) error {
	s, p, admin := n.d.servers[i], n.d.proxies[i], n.d.admins[i]
	// hold waits out the fault's length; the heal runs even if the run
	// ends first (a frozen node must not outlive the run).
	hold := func() { time.Sleep(f.For) }
	heal := context.WithoutCancel(ctx)
	switch nodeFault[f.Kind] {
	case "freeze":
		s.Freeze()
		hold()
		s.Thaw()
	case "kill": // and outage
		s.Kill()
		removed := s.RemoveData()
		hold()
		return errors.Join(removed, s.Restart(heal)) // restarted whatever happened: never left down
	case "snapshot": // and rollback
		// A replica's full sync (after a failover) may be saving: wait
		// for it, up to a TTL.
		err := admin.Save(ctx).Err()
		for wait := time.Now().Add(n.cfg.ttl); err != nil && strings.Contains(err.Error(), "in progress") && time.Now().Before(wait); {
			time.Sleep(20 * time.Millisecond)
			err = admin.Save(ctx).Err()
		}
		if err != nil {
			return fmt.Errorf("SAVE: %w", err)
		}
		hold()
		s.Kill()
		return s.Restart(heal)
	case "partition":
		p.SetDown(true)
		hold()
		p.SetDown(false)
	case "blackhole":
		p.SetBlackhole(true)
		hold()
		p.SetBlackhole(false)
		p.DropConnections() // what was swallowed is gone: no connection is in step any more
	case "latency":
		p.SetDelay(0, n.cfg.ttl/3)
		hold()
		p.SetDelay(0, 0)
	case "scriptflush":
		return admin.ScriptFlush(ctx).Err()
	case "flush": // and amnesia
		return admin.FlushAll(ctx).Err()
	case "evict": // and pressure
		return n.evict(ctx, f, admin)
	case "clockjump":
		return n.d.stepClock(i, f.Step)
	case "failover":
		return n.failover(ctx, f, i)
	default:
		return fmt.Errorf("unknown fault %q", f.Kind)
	}
	return nil
}

// holdNodes takes the fault locks of a majority fault's nodes, in
// ascending order so that no two faults wait on each other, and dates the
// fault's start; the func it returns dates its end and lets the nodes go.
func (n *nemesis) holdNodes(f *fault) (release func()) {
	for _, i := range f.Nodes {
		n.nodeMu[i].Lock()
	}
	f.Began = n.since()
	return func() {
		f.Ended = n.since()
		for _, i := range f.Nodes {
			n.nodeMu[i].Unlock()
		}
	}
}

// infoInt reads a numeric field of an INFO reply (0 if absent).
func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// evict puts a node under memory pressure as a cache's traffic would: a
// limit a little above what it holds, allkeys-random, and other data
// written all the while (4 KiB values every 5 ms, cycling over 64 names),
// so that each write evicts a key, a lock's among them, and the node goes
// on taking writes. The limit and the other data go when the fault ends.
func (n *nemesis) evict(ctx context.Context, f *fault, admin *redis.Client) error {
	heal := context.WithoutCancel(ctx)
	info, err := admin.Info(ctx, "memory").Result()
	if err != nil {
		return err
	}
	limit := infoInt(info, "used_memory") + 128<<10
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-random").Err(); err != nil {
		return err
	}
	if err := admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(limit, 10)).Err(); err != nil {
		return err
	}
	const fillers = 64
	value := strings.Repeat("x", 4<<10)
	tick := time.NewTicker(5 * time.Millisecond)
	end := time.After(f.For)
	for i := 0; ; i++ {
		select {
		case <-tick.C:
			admin.Set(heal, fmt.Sprintf("chaos:filler:%d", i%fillers), value, 0) // an OOM refusal is pressure too
			continue
		case <-end:
		}
		break
	}
	tick.Stop()
	names := make([]string, fillers)
	for i := range names {
		names[i] = fmt.Sprintf("chaos:filler:%d", i)
	}
	return errors.Join(admin.ConfigSet(heal, "maxmemory", "0").Err(),
		admin.ConfigSet(heal, "maxmemory-policy", "noeviction").Err(),
		admin.Del(heal, names...).Err())
}

// failover promotes node i's replica as a Sentinel would after its primary
// died, with the replica behind: it is promoted first (REPLICAOF NO ONE),
// the primary goes on granting for the fault's length (grants the new
// primary never sees: asynchronous replication's window, stretched), then
// the primary is killed and the node's proxy sends every client to the
// promoted replica. The old primary comes back as the new one's replica, so
// that the node can fail over again.
func (n *nemesis) failover(ctx context.Context, f *fault, i int) error {
	heal := context.WithoutCancel(ctx)
	old, promoted := n.d.servers[i], n.d.replicas[i]
	if promoted == nil {
		return fmt.Errorf("node %d has no replica (starting its last one failed)", i)
	}
	if err := promoted.Promote(heal); err != nil { // a primary from now on, restarts included
		return err
	}
	admin := promoted.Client()
	time.Sleep(f.For)
	old.Kill()
	n.d.proxies[i].SetTarget(promoted.Addr())
	n.d.proxies[i].DropConnections()
	n.d.admins[i].Close()
	n.d.servers[i], n.d.admins[i] = promoted, admin
	old.Close()
	n.d.replicas[i] = nil
	r, err := n.d.startReplica(heal, i, promoted)
	if err != nil {
		return err
	}
	n.d.replicas[i] = r
	return nil
}
