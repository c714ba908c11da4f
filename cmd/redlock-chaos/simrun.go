package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/unsafelocker"
)

// simConfig is a simulation run's: how many schedules, from which seed,
// and what to do with them.
type simConfig struct {
	seeds    int    // schedules in the safe configuration
	first    uint64 // the first seed
	controls bool   // run the negative controls too
	// controlSeeds is the most schedules a control may take to show its
	// violation (0: maxControlSeeds).
	controlSeeds int
	replays      int    // run the schedule of seed first this many times, and count its verdicts
	artefacts    string // where failing schedules' timelines go ("": nowhere)
}

// simSchedule is the shape of every simulated schedule: five nodes, three
// clients on two Lockers contending for two keys with leases of every
// shape (-mixed: one key, both keys at once, one key under Do), a fault
// every 0.7 s on average for 30 s of virtual time (then a quiet spell),
// every kind of fault. Seeds choose the transport and go-redis's retries
// (see scheduleConfig).
var simSchedule = []string{"-nodes", "5", "-clients", "3", "-lockers", "2", "-keys", "2", "-mixed", "-ttl", "1s", "-hold", "400ms",
	"-duration", "30s", "-fault-every", "700ms", "-resource", "redis"}

// simVariant is a configuration a schedule runs in: the safe one, or a
// negative control that leaves one safety step out and must show what
// that step prevents.
type simVariant struct {
	name string
	// shows is what the control must see (empty for the safe
	// configuration), and seen says whether a result shows it.
	shows string
	seen  func(*result) bool
	set   func(*config)
	// faults, where set, are the control's own kinds of fault: the ones
	// that stage what it needs often enough to see it.
	faults []string
}

var simVariants = []simVariant{
	{name: "safe", set: func(c *config) { c.safe = true }},
	{name: "unsafe", shows: "any violation (neither fencing nor the node guard)",
		seen: func(r *result) bool { return len(r.simViolations()) > 0 },
		set:  func(c *config) { c.safe = false }},
	{name: "no-guard", shows: "overlapping leases (fencing on, the guard's quarantines off)",
		seen: func(r *result) bool { return r.Counts.Overlaps > 0 },
		set:  func(c *config) { c.safe, c.sim.noQuarantine = true, true }},
	{name: "no-fencing", shows: "stale accesses accepted (the guard on, fencing off)",
		seen: func(r *result) bool { return r.Counts.StaleAccepted > 0 },
		set:  func(c *config) { c.safe, c.sim.noFencing = true, true }},
	{name: "validity-from-reply", shows: "overlapping leases (validity counted from the reply)",
		// A stall between an attempt's decision and its validity check
		// is what the check exists for; mixed with every other fault it
		// falls there too rarely (1 schedule in 20).
		faults: []string{"stall"},
		seen:   func(r *result) bool { return r.Counts.Overlaps > 0 },
		set:    func(c *config) { c.safe, c.sim.hooks = true, unsafelocker.Hooks{ValidityFromReply: true} }},
	{name: "no-release-on-failure", shows: "lock keys left when the clients stopped (failed attempts not released)",
		seen: func(r *result) bool { return r.Counts.KeysAtEnd > 0 },
		set:  func(c *config) { c.safe, c.sim.hooks = true, unsafelocker.Hooks{NoReleaseOnFailure: true} }},
}

// maxControlSeeds bounds the schedules a control may take to show its
// violation before the run fails it.
const maxControlSeeds = 40

// scheduleConfig is seed's schedule in variant v.
func scheduleConfig(seed uint64, v simVariant) config {
	cfg, err := parseFlags(simSchedule, io.Discard)
	if err != nil {
		panic(err) // simSchedule is a constant
	}
	cfg.seed, cfg.faults = seed, simFaultKinds
	if v.faults != nil {
		cfg.faults = v.faults
	}
	cfg.sim.variant = v.name
	cfg.sim.direct = seed%2 == 1
	cfg.sim.retries = seed/2%2 == 1
	v.set(&cfg)
	return cfg
}

// simViolations is what a simulated schedule in the safe configuration
// must not show: the real runs' violations, and overlapping leases (which
// the node guard's quarantines and the validity arithmetic prevent).
//
// Two things are counted apart (simReport), outside the library's
// guarantees as docs/failure-models.md states them: lock keys left when
// the clients stopped (a key left expires within its TTL: it costs
// waiting, not safety), and stale accesses accepted under a token issued
// twice, with what follows from them (increments lost, porcupine's
// verdict): fencing tokens are ordered only while a majority of nodes
// keeps its counters, and the simulation's faults take them from a
// majority (see "Simulation" there).
func (r *result) simViolations() []string {
	v := r.violations()
	if c := r.Counts; c.StaleAccepted > 0 && c.StaleAccepted == c.StaleSameToken {
		v = nil
		if c.KeysLeft > 0 {
			v = append(v, fmt.Sprintf("%d lock keys left after the TTL", c.KeysLeft))
		}
	}
	if r.Counts.Overlaps > 0 {
		v = append(v, fmt.Sprintf("%d overlapping leases", r.Counts.Overlaps))
	}
	return v
}

// simReport is a simulation run's tally.
type simReport struct {
	mu        sync.Mutex
	schedules int
	faults    int
	virtual   time.Duration
	leases    int
	multiKey  int                // of leases: two keys at once
	do        int                // of leases: under Do
	extended  int                // of do: extended past their first validity
	failed    []string           // safe schedules that failed, with why
	keysAtEnd []string           // safe schedules that left lock keys when the clients stopped
	sameToken []string           // safe schedules with stale accesses accepted under a token issued twice
	errs      []string           // schedules that could not run
	found     map[string]uint64  // control: the first seed that showed its violation
	tried     map[string]int     // control: schedules run
	trials    map[string]*trials // per kind of fault, safe schedules
	verdicts  map[string]int     // replays: verdict, how often
}

func newSimReport() *simReport {
	return &simReport{found: map[string]uint64{}, tried: map[string]int{}, trials: map[string]*trials{}, verdicts: map[string]int{}}
}

// addSafe counts a safe schedule's result, and returns how many have been
// counted.
func (r *simReport) addSafe(cfg config, res *result) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.schedules++
	if res.Counts.KeysAtEnd > 0 {
		r.keysAtEnd = append(r.keysAtEnd, fmt.Sprintf("seed %d (%s): %d", cfg.seed, transportOf(cfg), res.Counts.KeysAtEnd))
	}
	if res.Counts.StaleSameToken > 0 {
		r.sameToken = append(r.sameToken, fmt.Sprintf("seed %d (%s): %d", cfg.seed, transportOf(cfg), res.Counts.StaleSameToken))
	}
	r.virtual += res.Duration
	r.leases += res.Counts.Leases
	r.multiKey += res.Counts.MultiKey
	r.do += res.Counts.Do
	r.extended += res.Counts.Extended
	for _, t := range res.Trials {
		r.faults += t.Faults
		s := r.trials[t.Kind]
		if s == nil {
			s = &trials{Kind: t.Kind}
			r.trials[t.Kind] = s
		}
		s.Faults += t.Faults
		s.Overlapped += t.Overlapped
		s.Stale += t.Stale
	}
	if v := res.simViolations(); len(v) > 0 {
		r.failed = append(r.failed, fmt.Sprintf("seed %d (%s): %s", cfg.seed, transportOf(cfg), strings.Join(v, "; ")))
	}
	return r.schedules
}

func (r *simReport) faultCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.faults
}

func transportOf(cfg config) string {
	t := "auto-pipeline"
	if cfg.sim.direct {
		t = "direct"
	}
	if cfg.sim.retries {
		t += ", go-redis retries"
	}
	return t
}

// runSimulation runs the schedules as parallel subtests of t (each in its
// own bubble), then the controls, and writes the report to w. It fails t
// on a safe schedule's violation, on a schedule that could not run, and on
// a control that saw nothing.
func runSimulation(t *testing.T, sc simConfig, w io.Writer) *simReport {
	start := time.Now()
	rep := newSimReport()
	if sc.artefacts != "" {
		if err := os.MkdirAll(sc.artefacts, 0o755); err != nil {
			t.Fatalf("the artefacts' directory: %v", err)
		}
	}
	if sc.replays > 0 {
		replay(t, sc, rep, w)
		return rep
	}
	// One parent, so that the safe schedules and the controls share the
	// pool of parallel subtests (-test.parallel, GOMAXPROCS by default).
	t.Run("schedules", func(t *testing.T) {
		for i := range sc.seeds {
			seed := sc.first + uint64(i)
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				cfg := scheduleConfig(seed, simVariants[0])
				res, err := simulate(t, cfg)
				if err != nil {
					rep.mu.Lock()
					rep.errs = append(rep.errs, fmt.Sprintf("seed %d: %v", seed, err))
					rep.mu.Unlock()
					return
				}
				if done := rep.addSafe(cfg, res); sc.seeds >= 20 && done%(sc.seeds/10) == 0 {
					fmt.Fprintf(w, "simulation: %d of %d safe schedules, %d faults, %v\n", done, sc.seeds, rep.faultCount(), time.Since(start).Round(time.Second))
				}
				if len(res.simViolations()) > 0 {
					keepTimeline(t, sc, cfg, res, "safe")
				}
			})
		}
		if !sc.controls {
			return
		}
		for _, v := range simVariants[1:] {
			t.Run(v.name, func(t *testing.T) {
				t.Parallel()
				for i := range cmp.Or(sc.controlSeeds, maxControlSeeds) {
					seed := sc.first + uint64(i)
					cfg := scheduleConfig(seed, v)
					res, err := simulate(t, cfg)
					rep.mu.Lock()
					rep.tried[v.name]++
					if err != nil {
						rep.errs = append(rep.errs, fmt.Sprintf("%s, seed %d: %v", v.name, seed, err))
					}
					rep.mu.Unlock()
					if err == nil && v.seen(res) {
						rep.mu.Lock()
						rep.found[v.name] = seed
						rep.mu.Unlock()
						keepTimeline(t, sc, cfg, res, v.name)
						return
					}
				}
			})
		}
	})
	rep.write(w, sc, time.Since(start))
	for _, f := range rep.failed {
		t.Errorf("the safe configuration failed: %s", f)
	}
	for _, e := range rep.errs {
		t.Errorf("a schedule could not run: %s", e)
	}
	if sc.controls {
		for _, v := range simVariants[1:] {
			if _, ok := rep.found[v.name]; !ok {
				t.Errorf("the %s control saw no violation in %d schedules: it must show %s", v.name, rep.tried[v.name], v.shows)
			}
		}
	}
	return rep
}

// replay runs one schedule sc.replays times and counts its verdicts: the
// bubble fixes every timer, not the order in which the Go scheduler runs
// goroutines that are ready at one instant, so a schedule's history (and,
// rarely, its verdict) may differ between runs.
func replay(t *testing.T, sc simConfig, rep *simReport, w io.Writer) {
	cfg := scheduleConfig(sc.first, simVariants[0])
	for i := range sc.replays {
		res, err := simulate(t, cfg)
		verdict := "no violation"
		switch {
		case err != nil:
			verdict = "could not run: " + err.Error()
		case len(res.simViolations()) > 0:
			verdict = strings.Join(res.simViolations(), "; ")
			keepTimeline(t, sc, cfg, res, fmt.Sprintf("replay-%d", i))
		}
		rep.verdicts[verdict]++
		if i == 0 && err == nil {
			res.write(w, cfg)
		}
	}
	fmt.Fprintf(w, "\nreplays of seed %d (%s), %d runs:\n", sc.first, transportOf(cfg), sc.replays)
	for _, v := range slices.Sorted(maps.Keys(rep.verdicts)) {
		fmt.Fprintf(w, "  %4d  %s\n", rep.verdicts[v], v)
	}
	if len(rep.verdicts) > 1 {
		fmt.Fprintln(w, "  (the verdict differed between runs: the goroutines' interleaving is not replayed, only time)")
	}
}

// keepTimeline writes a schedule's timeline (SVG) and its report where
// sc.artefacts says, for a failing safe schedule or a control's finding.
func keepTimeline(t *testing.T, sc simConfig, cfg config, res *result, what string) {
	if sc.artefacts == "" {
		return
	}
	base := filepath.Join(sc.artefacts, fmt.Sprintf("%s-seed-%d", what, cfg.seed))
	if err := writeTimeline(base+".svg", res); err != nil {
		t.Logf("timeline of seed %d: %v", cfg.seed, err)
	}
	f, err := os.Create(base + ".txt")
	if err != nil {
		t.Logf("report of seed %d: %v", cfg.seed, err)
		return
	}
	defer f.Close()
	res.write(f, cfg)
}

func (r *simReport) write(w io.Writer, sc simConfig, took time.Duration) {
	var b strings.Builder
	fmt.Fprintf(&b, "simulation: %d schedules in the safe configuration (seeds %d to %d), %d faults carried out, %v of virtual time, %d leases (%d of two keys at once, %d under Do, %d of those extended), in %v of wall time\n",
		r.schedules, sc.first, sc.first+uint64(sc.seeds)-1, r.faults, r.virtual.Round(time.Second), r.leases, r.multiKey, r.do, r.extended, took.Round(time.Second))
	fmt.Fprintf(&b, "violations in the safe configuration: %d schedules\n", len(r.failed))
	for _, f := range r.failed {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	fmt.Fprintf(&b, "stale accesses accepted under a token issued twice (fencing counters lost on a majority: outside fencing's guarantee): %d schedules\n", len(r.sameToken))
	for _, k := range r.sameToken {
		fmt.Fprintf(&b, "  %s\n", k)
	}
	fmt.Fprintf(&b, "lock keys left when the clients stopped (a liveness cost, not a violation): %d schedules\n", len(r.keysAtEnd))
	for _, k := range r.keysAtEnd {
		fmt.Fprintf(&b, "  %s\n", k)
	}
	if len(r.errs) > 0 {
		fmt.Fprintf(&b, "schedules that could not run: %d\n", len(r.errs))
		for _, e := range r.errs {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	fmt.Fprintf(&b, "per kind of fault (safe schedules):\n  %-11s %7s %24s %22s\n", "fault", "trials", "then overlapping leases", "then stale accepted")
	for _, k := range simFaultKinds {
		if s := r.trials[k]; s != nil {
			fmt.Fprintf(&b, "  %-11s %7d %24d %22d\n", k, s.Faults, s.Overlapped, s.Stale)
		}
	}
	if sc.controls {
		b.WriteString("negative controls (each must show its violation):\n")
		for _, v := range simVariants[1:] {
			if seed, ok := r.found[v.name]; ok {
				fmt.Fprintf(&b, "  %-22s found: seed %d, after %d schedules: %s\n", v.name, seed, r.tried[v.name], v.shows)
			} else {
				fmt.Fprintf(&b, "  %-22s NOT FOUND in %d schedules: %s\n", v.name, r.tried[v.name], v.shows)
			}
		}
	}
	io.WriteString(w, b.String())
}
