package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

func (r *result) write(w io.Writer, cfg config) error {
	if cfg.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %s configuration, %s, ran %v\n", r.Seed, r.Config, r.Server, r.Duration.Round(time.Millisecond))
	switch v := cfg.sim.variant; {
	case v == "safe":
		fmt.Fprintf(&b, "replay: redlock-chaos -sim -seed %d -replays 10 (time replays, the goroutines' interleaving may not)\n", cfg.seed)
	case v != "":
		fmt.Fprintf(&b, "replay: seed %d of the %s control in TestSimulation (cmd/redlock-chaos/simrun.go)\n", cfg.seed, v)
	default:
		fmt.Fprintf(&b, "replay: redlock-chaos %s\n", replayFlags(cfg))
	}
	fmt.Fprintf(&b, "\nfaults (%d):\n", len(r.Faults))
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	c := r.Counts
	fmt.Fprintf(&b, "\nleases granted               %d\n", c.Leases)
	fmt.Fprintf(&b, "longest wait for a lease     %v\n", c.LongestWait.Round(time.Millisecond))
	fmt.Fprintf(&b, "overlapping validity windows %d\n", c.Overlaps)
	fmt.Fprintf(&b, "writes accepted              %d (refused as stale %d, outcome unknown %d)\n", c.Accepted, c.Rejected, c.Unknown)
	fmt.Fprintf(&b, "writes after the lease ended %d, accepted %d\n", c.LateWrites, c.LateAccepted)
	fmt.Fprintf(&b, "stale accesses accepted      %d\n", c.StaleAccepted)
	fmt.Fprintf(&b, "increments lost              %d\n", c.LostIncrements)
	fmt.Fprintf(&b, "lock keys left after the TTL %d\n", c.KeysLeft)
	fmt.Fprintf(&b, "lock calls past their bound  %d of %d (deadline + %v)\n", c.PastBound, c.BoundedCalls, boundSlack)
	fmt.Fprintf(&b, "linearizable (porcupine)     %s", r.Linearizable)
	if r.HistoryFile != "" {
		fmt.Fprintf(&b, " (history: %s)", r.HistoryFile)
	}
	b.WriteString("\n")
	if len(r.Trials) > 0 {
		b.WriteString("\nper kind of fault (a violation counts for every fault whose window, to 2 TTLs after its end, holds it):\n")
		fmt.Fprintf(&b, "  %-11s %7s %24s %22s\n", "fault", "trials", "then overlapping leases", "then stale accepted")
		for _, t := range r.Trials {
			fmt.Fprintf(&b, "  %-11s %7d %24d %22d\n", t.Kind, t.Faults, t.Overlapped, t.Stale)
		}
	}
	if len(r.Errors) > 0 {
		b.WriteString("\nerrors:\n")
		for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
			fmt.Fprintf(&b, "  %-28s %d\n", k, r.Errors[k])
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// replayFlags are the flags that replay the run's schedule.
func replayFlags(cfg config) string {
	return fmt.Sprintf("-seed %d -config %s -nodes %d -clients %d -lockers %d -keys %d -ttl %v -hold %v -duration %v -fault-every %v -faults %s",
		cfg.seed, configName(cfg), cfg.nodes, cfg.clients, cfg.lockers, cfg.keys, cfg.ttl, cfg.hold, cfg.duration, cfg.faultEvery, strings.Join(cfg.faults, ","))
}

// violations lists what the run saw that a lock with fencing must prevent.
func (r *result) violations() []string {
	var v []string
	c := r.Counts
	if c.StaleAccepted > 0 {
		v = append(v, fmt.Sprintf("%d stale accesses accepted", c.StaleAccepted))
	}
	if c.LostIncrements > 0 {
		v = append(v, fmt.Sprintf("%d increments lost", c.LostIncrements))
	}
	if r.Linearizable == "Illegal" {
		v = append(v, "a history porcupine finds not linearizable")
	}
	if c.KeysLeft > 0 {
		v = append(v, fmt.Sprintf("%d lock keys left after the TTL", c.KeysLeft))
	}
	return v
}

// verdict is the exit status's reason: the safe configuration must show no
// violation; the unsafe one must show one, or (with overlapping leases) at
// least the double grants the safe one prevents.
func (r *result) verdict(cfg config) error {
	v := r.violations()
	if cfg.safe {
		if len(v) > 0 {
			return fmt.Errorf("the safe configuration failed (seed %d): %s", r.Seed, strings.Join(v, "; "))
		}
		return nil
	}
	if len(v) == 0 && r.Counts.Overlaps == 0 {
		return errors.New("the unsafe configuration saw no violation: a control that sees nothing proves nothing (more faults, more clients, or a longer run)")
	}
	return nil
}
