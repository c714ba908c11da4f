package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// models names the failure model each kind of fault stages (the numbers
// are docs/failure-models.md's).
var models = map[string]string{
	"pause":       "1. client pause past expiry",
	"latency":     "2-3. replies delayed a third of the TTL (one node)",
	"clockjump":   "4. clock step forward (a majority)",
	"kill":        "5. restart without persistence (one node)",
	"outage":      "5. restart without persistence (a majority)",
	"snapshot":    "5. restart from an old snapshot (one node)",
	"rollback":    "5. restart from an old snapshot (a majority)",
	"amnesia":     "5, 7. every key lost (a majority)",
	"flush":       "7. every key lost (one node)",
	"evict":       "7. eviction under memory pressure (one node)",
	"pressure":    "7. eviction under memory pressure (a majority)",
	"failover":    "6. failover to a replica that missed grants (a majority)",
	"partition":   "8. partition (one node)",
	"blackhole":   "8. silent partition (one node)",
	"scriptflush": "9. script-cache loss (one node)",
	"freeze":      "11. a stalled node (one node)",
	"clockrate":   "4. clock running fast (a majority; simulation only)",
	"lostreply":   "2-3. replies lost after the command ran (one node; simulation only)",
	"stall":       "1. client pause at a reading of its clock, inside Lock or Unlock (simulation only)",
}

// controlled says whether a kind of fault breaks the unsafe configuration:
// those that strike a majority, and the client's pause. A fault on one node
// is outvoted by the others in both configurations, so it has no control
// to show; its rows show that the lock stays live and safe through it.
func controlled(kind string) bool { return kind == "pause" || kind == "stall" || onMajority(kind) }

// runModels runs each kind of fault alone, unsafe then safe, and prints the
// trials as a Markdown table. It fails when a safe run fails its verdict,
// and when a control (an unsafe run of a kind that breaks it) sees no
// violation: a control that observes nothing proves nothing.
//
// run is one run: chaos (real servers), or a simulated schedule (-sim).
func runModels(ctx context.Context, cfg config, stdout, stderr io.Writer, run runner) error {
	type row struct {
		kind         string
		unsafe, safe *result
	}
	var rows []row
	var failed []string
	seed := cfg.seed
	for _, kind := range cfg.faults {
		r := row{kind: kind}
		for _, safe := range []bool{false, true} {
			c := cfg
			c.faults, c.safe, c.seed = []string{kind}, safe, seed
			seed++
			res, err := run(ctx, c, stderr)
			if err != nil {
				// One run that could not finish (a server that would not
				// start on a loaded machine) costs its row, not the table.
				if ctx.Err() != nil {
					return err
				}
				failed = append(failed, fmt.Sprintf("%s, %s: %v", kind, configName(c), err))
				res = &result{Seed: c.seed, Config: configName(c), Linearizable: "run failed: " + err.Error()}
			}
			if safe {
				r.safe = res
				if err := res.verdict(c); err != nil {
					failed = append(failed, fmt.Sprintf("%s: %v", kind, err))
				}
				// The run's verdict allows overlapping beliefs (fencing
				// is there for them), but no fault here should get past
				// the node guard: a pause ends beliefs before another
				// holder comes, and the guard quarantines the rest.
				if res.Counts.Overlaps > 0 {
					failed = append(failed, fmt.Sprintf("%s: %d overlapping leases with the node guard on", kind, res.Counts.Overlaps))
				}
			} else {
				r.unsafe = res
				if t := res.trialsOf(kind); controlled(kind) && t.Overlapped+t.Stale == 0 {
					failed = append(failed, fmt.Sprintf("%s: the unsafe control saw no violation in %d trials", kind, t.Faults))
				}
			}
		}
		rows = append(rows, r)
	}
	var b strings.Builder
	b.WriteString("| model | fault | config | seed | trials | then overlapping leases | then stale accepted | leases | increments lost | keys left | porcupine | longest wait |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		for _, res := range []*result{r.unsafe, r.safe} {
			t := res.trialsOf(r.kind)
			conf := res.Config
			if !controlled(r.kind) && conf == "unsafe" {
				conf = "unsafe (no control: outvoted)"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %d | %d | %d | %s | %v |\n", models[r.kind], r.kind, conf, res.Seed, t.Faults,
				t.Overlapped, t.Stale, res.Counts.Leases, res.Counts.LostIncrements, res.Counts.KeysLeft, res.Linearizable, res.Counts.LongestWait.Round(time.Millisecond))
		}
	}
	if _, err := io.WriteString(stdout, b.String()); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("safe runs failed: %s", strings.Join(failed, "; "))
	}
	return nil
}

// runner is one run of a configuration: on real servers (chaos), or
// simulated (simulate).
type runner func(ctx context.Context, cfg config, progress io.Writer) (*result, error)

// trialsOf is the trials of one kind of fault (zero if it never ran).
func (r *result) trialsOf(kind string) trials {
	for _, x := range r.Trials {
		if x.Kind == kind {
			return x
		}
	}
	return trials{Kind: kind}
}
