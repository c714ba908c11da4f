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
	Rate   float64       `json:"rate,omitempty"`  // a clockrate's clock rate (simulation only)
	// Reading is a stall's: which of the Locker's next clock readings in
	// an attempt is late (1: the next), so that stalls fall before the
	// first send and between the decision and the validity check alike.
	Reading int           `json:"reading,omitempty"`
	Began   time.Duration `json:"began"` // carried out
	Ended   time.Duration `json:"ended"`
	Err     string        `json:"err,omitempty"`
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
	if f.Rate > 0 {
		s += fmt.Sprintf(" x%.2f", f.Rate)
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
	// The simulation's own (simulation.go): a majority's clocks running
	// fast, and one node losing replies after running the commands.
	"clockrate": "clockrate", "lostreply": "lostreply",
}

// onMajority says whether a kind of fault strikes a majority at once.
func onMajority(kind string) bool {
	switch kind {
	case "outage", "amnesia", "rollback", "pressure", "clockjump", "failover", "clockrate":
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
		case f.Kind == "pause" || f.Kind == "stall":
			// Longer than any lease's validity: the paused holder writes
			// after its lease ended, and another may have taken it (a
			// stall: the Locker's reading of its clock is late by as
			// much, wherever it falls).
			f.Client, f.For = rng.IntN(cfg.clients), cfg.ttl*3/2
			if f.Kind == "stall" {
				f.Reading = 1 + rng.IntN(2)
			}
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
		case f.Kind == "clockrate":
			// Clocks running 1.5 to 3 times too fast for one to two TTLs
			// (a broken time source, an NTP slew gone wrong): held keys
			// expire early, gradually rather than at once.
			f.Rate = 1.5 + 1.5*rng.Float64()
			f.For = cfg.ttl + time.Duration(rng.Int64N(int64(cfg.ttl)))
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

// target is what the nemesis strikes: real servers behind proxies
// (deployment.go), or simulated ones (simulation.go).
type target interface {
	// strike carries out a node's fault (nodeFault's kinds) on node i,
	// healing it before it returns.
	strike(ctx context.Context, f *fault, i int) error
}

// staller is a target whose Lockers' clocks the nemesis can stall
// (simulation.go): the "stall" fault.
type staller interface {
	// stall makes the next reading of the clock of client f.Client's
	// Locker wait f.For, and dates f when it does.
	stall(f *fault) error
}

// nemesis carries out a schedule on a deployment and on the clients.
type nemesis struct {
	nodes  target
	cfg    config
	start  time.Time
	pauses []chan *fault // one per client: a pause to take before its next write, which it dates
	// nodeFaults is one fault at a time per node: a channel of one slot,
	// not a mutex, because a goroutine waiting on a mutex is not durably
	// blocked in a synctest bubble, and the simulation's clock would stop.
	nodeFaults []chan struct{}
}

func newNemesis(nodes target, cfg config, start time.Time) *nemesis {
	n := &nemesis{nodes: nodes, cfg: cfg, start: start, pauses: make([]chan *fault, cfg.clients), nodeFaults: make([]chan struct{}, cfg.nodes)}
	for i := range n.pauses {
		n.pauses[i] = make(chan *fault, 1)
	}
	for i := range n.nodeFaults {
		n.nodeFaults[i] = make(chan struct{}, 1)
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
	if f.Kind == "stall" {
		s, ok := n.nodes.(staller)
		if !ok {
			return errors.New("these nodes' Lockers cannot be stalled")
		}
		f.Began, f.Ended = -1, -1 // until a clock reading takes it
		return s.stall(f)
	}
	if onMajority(f.Kind) {
		// A majority fault is its node's fault on each of the nodes at
		// once.
		defer n.holdNodes(f)()
		errs := make([]error, len(f.Nodes))
		var wg sync.WaitGroup
		for j, i := range f.Nodes {
			wg.Go(func() { errs[j] = n.nodes.strike(ctx, f, i) })
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	n.nodeFaults[f.Node] <- struct{}{}
	defer func() { <-n.nodeFaults[f.Node] }()
	f.Began = n.since()
	defer func() { f.Ended = n.since() }()
	return n.nodes.strike(ctx, f, f.Node)
}

// holdNodes takes the fault locks of a majority fault's nodes, in
// ascending order so that no two faults wait on each other, and dates the
// fault's start; the func it returns dates its end and lets the nodes go.
func (n *nemesis) holdNodes(f *fault) (release func()) {
	for _, i := range f.Nodes {
		n.nodeFaults[i] <- struct{}{}
	}
	f.Began = n.since()
	return func() {
		f.Ended = n.since()
		for _, i := range f.Nodes {
			<-n.nodeFaults[i]
		}
	}
}
