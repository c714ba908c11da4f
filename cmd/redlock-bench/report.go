package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

var quantiles = []struct {
	name string
	q    float64
}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p99.9", 0.999}, {"max", 1}}

func printTable(w io.Writer, r *result) {
	fmt.Fprintf(w, "\n%s: %s\n", r.Impl, r.About)
	fmt.Fprintf(w, "  %.0f cycles/s; %d acquired, %d contended, %d errors in %v; %.0f allocs/cycle\n",
		r.rate(), r.Acquired, r.Contended, r.Errors, r.Elapsed.Round(time.Millisecond), r.Allocs)
	if r.FirstError != "" {
		fmt.Fprintf(w, "  first error: %s\n", r.FirstError)
	}
	for _, f := range r.Faults {
		fmt.Fprintf(w, "  %s\n", f)
	}
	if r.Events != nil {
		fmt.Fprintf(w, "  events: %s\n", formatEvents(r.Events))
	}
	fmt.Fprintf(w, "  longest time without a grant: %v\n", r.LongestGap.Round(time.Millisecond))
	if per := r.commandsPerAcquisition(); per > 0 {
		fmt.Fprintf(w, "  node commands: %.1f per acquisition (%d in all)\n", per, r.NodeCommands)
	}
	fmt.Fprintf(w, "  %-8s", "latency")
	for _, q := range quantiles {
		fmt.Fprintf(w, " %10s", q.name)
	}
	fmt.Fprintln(w)
	for _, row := range []struct {
		name string
		h    *hist
	}{{"acquire", r.acquire}, {"release", r.release}, {"cycle", r.cycle}, {"hand-off", r.handoff}} {
		if row.h == nil || (row.name == "hand-off" && row.h.total == 0) {
			continue
		}
		fmt.Fprintf(w, "  %-8s", row.name)
		for _, q := range quantiles {
			fmt.Fprintf(w, " %10s", fmtDur(row.h.quantile(q.q)))
		}
		fmt.Fprintln(w)
	}
}

// printComparison prints one line per implementation with ratios against
// redlock (the first result, if it is redlock).
func printComparison(w io.Writer, rs []*result) {
	if len(rs) < 2 {
		return
	}
	base := rs[0]
	fmt.Fprintf(w, "\n%-17s %10s %9s %10s %9s %10s %9s %8s\n", "side by side", "cycles/s", "vs "+base.Impl, "cycle p50", "vs "+base.Impl, "cycle p99", "vs "+base.Impl, "errors")
	for _, r := range rs {
		fmt.Fprintf(w, "%-17s %10.0f %8.2fx %10s %8.2fx %10s %8.2fx %8d\n", r.Impl,
			r.rate(), ratio(r.rate(), base.rate()),
			fmtDur(r.cycle.quantile(.5)), ratio(float64(r.cycle.quantile(.5)), float64(base.cycle.quantile(.5))),
			fmtDur(r.cycle.quantile(.99)), ratio(float64(r.cycle.quantile(.99)), float64(base.cycle.quantile(.99))),
			r.Errors)
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0fµs", float64(d)/1e3)
}

type jsonLatency map[string]int64 // quantile name -> nanoseconds

type jsonResult struct {
	*result
	CyclesPerSec float64                `json:"cycles_per_sec"`
	Latency      map[string]jsonLatency `json:"latency_ns"`
}

type jsonReport struct {
	Nodes   string       `json:"nodes"`
	Config  jsonConfig   `json:"config"`
	Results []jsonResult `json:"results"`
}

type jsonConfig struct {
	Clients  int    `json:"clients"`
	Keys     int    `json:"keys"`
	TTL      string `json:"ttl"`
	Hold     string `json:"hold"`
	Duration string `json:"duration"`
	Ops      int    `json:"ops"`
	Mode     string `json:"mode"`
	Fencing  bool   `json:"fencing"`
}

func writeJSON(w io.Writer, describe string, cfg config, rs []*result) error {
	rep := jsonReport{Nodes: describe, Config: jsonConfig{
		Clients: cfg.clients, Keys: cfg.keys, TTL: cfg.ttl.String(), Hold: cfg.hold.String(),
		Duration: cfg.duration.String(), Ops: cfg.ops, Mode: cfg.mode, Fencing: cfg.fencing,
	}}
	for _, r := range rs {
		jr := jsonResult{result: r, CyclesPerSec: r.rate(), Latency: map[string]jsonLatency{}}
		for name, h := range map[string]*hist{"acquire": r.acquire, "release": r.release, "cycle": r.cycle} {
			l := jsonLatency{}
			for _, q := range quantiles {
				l[q.name] = int64(h.quantile(q.q))
			}
			jr.Latency[name] = l
		}
		rep.Results = append(rep.Results, jr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
