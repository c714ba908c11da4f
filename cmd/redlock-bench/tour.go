package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// The tour is what the command runs with no flags (or -tour): the scenarios
// where lock implementations differ, each side by side with the floor and
// redsync on five in-process nodes, and each ended by one line, computed from
// what was measured, that says what it shows: who won and by how much, or
// that the figures are within noise (noiseRatio), and each implementation's
// errors by kind. It takes about two minutes.
//
// In-process nodes share this process's CPU, so the scenarios are chosen
// for what such nodes can show honestly: latency where a delay proxy sets
// it (zones), the cost of a silent node (freeze), and the CPU and
// allocations per cycle of client and nodes together (load, contention).
// Their figures are not the README's, measured on redis-server processes
// with other clients and durations; each scenario says how.

// scenario is one step of the tour.
type scenario struct {
	title string
	args  []string // the flags of the equivalent single run, printed for reproduction
	// spawn: on real redis-server processes (-spawn 5) where redis-server
	// is on PATH, so that the client's CPU is its own; in-process otherwise.
	spawn bool
	// readme is how the README's headline figure for this scenario was
	// measured, where it has one: what differs from the tour's run.
	readme string
	// conclude says, from the results by implementation, what the scenario
	// shows: every claim in it is computed from those results.
	conclude func(r map[string]*result) string
}

var tourScenarios = []scenario{
	{
		title:    "zones: nodes 1, 2, 3, 4 and 50 ms away (one-way, through a delay proxy)",
		args:     []string{"-node-latency", "1ms,2ms,3ms,4ms,50ms", "-clients", "4", "-keys", "4", "-duration", "3s", "-rounds", "3", "-impl", "redlock,raw,redsync"},
		readme:   "13.96 ms p50 was 1 client on five redis-server processes, 20 s in 5 rounds",
		conclude: zonesNote,
	},
	{
		title:    "a frozen node: node 4 accepts connections and answers nothing, for the whole run",
		args:     []string{"-fault", "freeze:4@0s", "-clients", "4", "-keys", "4", "-duration", "3s", "-impl", "redlock,redsync,redsync-failfast"},
		readme:   "700 µs p50 was 1 client on five redis-server processes, 10 s",
		conclude: freezeNote,
	},
	{
		title:  "load: 16 clients on 16 keys, no contention",
		args:   []string{"-clients", "16", "-keys", "16", "-duration", "6s", "-rounds", "12", "-impl", "redlock,raw,redsync,redsync-failfast"},
		spawn:  true,
		readme: "12,882 cycles/s was on five redis-server processes (as here where redis-server is installed), 20 s in 10 rounds",
		conclude: func(r map[string]*result) string {
			rl, rs, ff, floor := r["redlock"], r["redsync"], r["redsync-failfast"], r["raw"]
			return fmt.Sprintf("%s; the floor (raw, one node) %s cycles/s; allocs/cycle: redlock %.0f, redsync %.0f, redsync-failfast %.0f",
				standings(throughput, rl, rs, ff), fmtRate(floor.rate()), rl.Allocs, rs.Allocs, ff.Allocs)
		},
	},
	{
		title:    "contention: 4 clients on one key, one attempt each (trylock)",
		args:     []string{"-clients", "4", "-keys", "1", "-duration", "6s", "-rounds", "12", "-impl", "redlock,raw,redsync,redsync-failfast"},
		conclude: contentionNote,
	},
}

// conclusion is the line that ends the scenario: what its results show, and
// each implementation's errors.
func (sc scenario) conclusion(rs []*result) string {
	byName := map[string]*result{}
	for _, r := range rs {
		byName[r.Impl] = r
	}
	return sc.conclude(byName) + "; " + errorSummary(rs)
}

// farRoundTrip is the zones' 50 ms node's round trip through its proxy: a
// cycle p50 above it waited for that node.
const farRoundTrip = 100 * time.Millisecond

func zonesNote(r map[string]*result) string {
	rl, floor, rs := r["redlock"], r["raw"], r["redsync"]
	var b strings.Builder
	b.WriteString(standings(cycleP50, rl, rs))
	lead := ratio(float64(p50(rl)), float64(p50(floor)))
	if lead < noiseRatio && lead > 1/noiseRatio {
		fmt.Fprintf(&b, "; redlock's p50 is within noise of the floor's (raw on the 3 ms node: %s, %.2fx)", fmtDur(p50(floor)), lead)
	} else {
		fmt.Fprintf(&b, "; redlock's p50 is %.2fx the floor's (raw on the 3 ms node: %s)", lead, fmtDur(p50(floor)))
	}
	for _, x := range []*result{rs, rl} {
		if p50(x) >= farRoundTrip {
			fmt.Fprintf(&b, "; %s's p50 is over the 50 ms node's %v round trip: it waits for that node", x.Impl, farRoundTrip)
		} else {
			fmt.Fprintf(&b, "; %s's p50 is under the 50 ms node's %v round trip: it decides without that node", x.Impl, farRoundTrip)
		}
	}
	return b.String()
}

// silentWait is a cycle p50 that only waiting out a timeout on the frozen
// node explains: a live node answers in milliseconds.
const silentWait = time.Second

func freezeNote(r map[string]*result) string {
	rl, rs, ff := r["redlock"], r["redsync"], r["redsync-failfast"]
	var b strings.Builder
	b.WriteString(standings(throughput, rl, ff, rs))
	fmt.Fprintf(&b, "; cycle p50: redlock %s, redsync-failfast %s, redsync %s", fmtDur(p50(rl)), fmtDur(p50(ff)), fmtDur(p50(rs)))
	var waited []string
	for _, x := range []*result{rl, ff, rs} {
		if p50(x) >= silentWait {
			waited = append(waited, x.Impl)
		}
	}
	if len(waited) > 0 {
		fmt.Fprintf(&b, "; %s waited out a timeout on the silent node in most cycles (p50 over %v)", joinAnd(waited), silentWait)
	}
	if p50(rs) >= silentWait && p50(ff) < silentWait {
		b.WriteString("; redsync avoids it only with WithFailFast(true), not its default")
	}
	return b.String()
}

// contentionNote says who was granted the lock most often on one key, and
// how many refused attempts each made per grant.
func contentionNote(r map[string]*result) string {
	rl, rs, ff := r["redlock"], r["redsync"], r["redsync-failfast"]
	per := func(r *result) float64 { return ratio(float64(r.Contended), float64(r.Acquired)) }
	granted := throughput
	granted.name = "granted cycles/s"
	return fmt.Sprintf("%s; refused attempts per grant: redlock %.1f, redsync %.1f, redsync-failfast %.1f",
		standings(granted, rl, rs, ff), per(rl), per(rs), per(ff))
}

func p50(r *result) time.Duration { return r.cycle.quantile(.5) }

// runTour runs tourScenarios in turn on fresh in-process nodes each, and
// prints for each the side-by-side table and its conclusion, then the
// conclusions together, the errors of the whole tour and how long it took.
func runTour(ctx context.Context, base config, stdout, stderr io.Writer) error {
	began := time.Now()
	fmt.Fprintln(stdout, "redlock-bench: the tour, on five Redis nodes (in-process miniredis, or redis-server processes where noted), each scenario side by side with the floor (raw: one node's SET NX PX and compare-and-delete) and redsync; about two minutes")
	fmt.Fprintln(stdout, "(flags give single runs: go doc ./cmd/redlock-bench; each scenario names the flags that repeat it)")
	fmt.Fprintf(stdout, "within noise: figures less than %.2fx apart name no winner (on this project's shared 2-vCPU machine one implementation run against itself differed by up to 5%%, and redsync and redsync-failfast, the same commands when no node fails, by 6%%)\n", noiseRatio)
	fmt.Fprintln(stdout, "not the README's headline figures: those ran on five redis-server processes, with 1 client (16 for load), for 10 to 20 s; here in-process nodes share this process's CPU, with 4 clients (16 for load), for 3 to 6 s. Compare implementations within a scenario, not a figure with the README's")
	var conclusions []string
	var tally []*result // errors by implementation, over the tour
	for i, sc := range tourScenarios {
		args, where := sc.args, "five in-process nodes"
		if _, err := exec.LookPath("redis-server"); sc.spawn && err == nil {
			args, where = append([]string{"-spawn", "5"}, args...), "five redis-server processes on loopback"
		}
		title, shown := sc.title+" ("+where+")", strings.Join(args, " ")
		if base.quiet {
			args = append([]string{"-q"}, args...)
		}
		cfg, err := parseFlags(args, stderr)
		if err != nil {
			return fmt.Errorf("tour scenario %d: %w", i+1, err)
		}
		fmt.Fprintf(stdout, "\n== %d/%d %s\n   redlock-bench %s\n   %s\n", i+1, len(tourScenarios), title, shown, setting(cfg, where, sc.readme))
		m, err := measure(ctx, cfg, io.Discard, stderr)
		if err != nil {
			return fmt.Errorf("tour scenario %d: %w", i+1, err)
		}
		m.close()
		printTourTable(stdout, m.results)
		for _, r := range m.results {
			tally = tallyErrors(tally, r)
		}
		c := sc.conclusion(m.results)
		conclusions = append(conclusions, c)
		fmt.Fprintf(stdout, "-> %s\n", c)
	}
	fmt.Fprintln(stdout, "\nin short:")
	for i, c := range conclusions {
		fmt.Fprintf(stdout, "  %d. %s\n", i+1, c)
	}
	fmt.Fprintf(stdout, "  over the tour, %s\n", errorSummary(tally))
	fmt.Fprintf(stdout, "\nin-process nodes share this process's CPU: their latency is not a network's, and their cost is in every figure. -spawn 5 runs real redis-server processes, -nodes your own servers. The tour took %v\n", time.Since(began).Round(time.Second))
	return ctx.Err()
}

// setting says how a scenario runs, and what differs from the README's
// headline figure for it (readme), if it has one.
func setting(cfg config, where, readme string) string {
	keys := fmt.Sprintf("%d keys", cfg.keys)
	if cfg.keys == 1 {
		keys = "one key"
	}
	s := fmt.Sprintf("%d clients on %s, %v per implementation", cfg.clients, keys, cfg.duration)
	if cfg.rounds > 1 {
		s += fmt.Sprintf(" in %d interleaved rounds", cfg.rounds)
	}
	s += ", on " + where
	if readme != "" {
		s += "; not comparable with the README's headline: its " + readme
	}
	return s
}

// tallyErrors adds r's errors to those of its implementation in tally.
func tallyErrors(tally []*result, r *result) []*result {
	i := slices.IndexFunc(tally, func(t *result) bool { return t.Impl == r.Impl })
	if i < 0 {
		tally, i = append(tally, &result{Impl: r.Impl}), len(tally)
	}
	tally[i].Errors += r.Errors
	tally[i].addKinds(r.ErrorKinds)
	return tally
}

// printTourTable is the compact side-by-side table of a tour scenario.
func printTourTable(w io.Writer, rs []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "impl\tcycles/s\tcontended\terrors\tcycle p50\tp99\tmax\tallocs/cycle\tlongest without a grant\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%s\t%s\t%s\t%.0f\t%s\t\n", r.Impl, r.rate(), r.Contended, r.Errors,
			fmtDur(r.cycle.quantile(.5)), fmtDur(r.cycle.quantile(.99)), fmtDur(r.cycle.quantile(1)), r.Allocs, fmtDur(r.LongestGap))
	}
	tw.Flush()
	for _, r := range rs {
		if r.FirstError != "" {
			fmt.Fprintf(w, "   %s: first error: %s\n", r.Impl, r.FirstError)
		}
	}
}

var errTourFlags = errors.New("-tour takes no other flag but -q")
