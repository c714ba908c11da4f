package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// runModels runs each kind of fault alone, unsafe then safe, and prints the
// trials as a Markdown table. It fails when a safe run fails its verdict.
func runModels(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
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
			res, err := chaos(ctx, c, stderr)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", kind, configName(c), err)
			}
			if safe {
				r.safe = res
				if err := res.verdict(c); err != nil {
					failed = append(failed, fmt.Sprintf("%s: %v", kind, err))
				}
			} else {
				r.unsafe = res
			}
		}
		rows = append(rows, r)
	}
	var b strings.Builder
	b.WriteString("| fault | config | seed | trials | then overlapping leases | then stale accepted | leases | increments lost | keys left | porcupine | longest wait |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		for _, res := range []*result{r.unsafe, r.safe} {
			t := trials{Kind: r.kind}
			for _, x := range res.Trials {
				if x.Kind == r.kind {
					t = x
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %s | %v |\n", r.kind, res.Config, res.Seed, t.Faults,
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
