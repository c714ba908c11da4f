package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
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

// noiseRatio is the tour's noise rule: two implementations whose figures
// differ by less than this ratio are said to be within noise, and neither
// is named the winner. Why 1.10: on this project's shared 2-vCPU machine
// one implementation run against itself differed by up to 5% in 2 s turns
// (docs/performance.md), and in the tour's contention scenario redsync and
// redsync-failfast, which send the same commands when no node fails,
// differed by 6% (2,278 against 2,140 cycles/s). The tour's turns are
// 0.5 to 3 s on a machine others share: twice the worst self-difference.
const noiseRatio = 1.10

// metric is a figure the tour ranks implementations by.
type metric struct {
	name   string
	value  func(*result) float64
	higher bool // a higher value is better
	show   func(float64) string
}

var (
	throughput = metric{"cycles/s", func(r *result) float64 { return r.rate() }, true, fmtRate}
	cycleP50   = metric{"cycle p50", func(r *result) float64 { return float64(p50(r)) }, false,
		func(v float64) string { return fmtDur(time.Duration(v)) }}
)

// lead is how many times better a is than b on m (at least 1 when a is
// ahead).
func (m metric) lead(a, b *result) float64 {
	if m.higher {
		return ratio(m.value(a), m.value(b))
	}
	return ratio(m.value(b), m.value(a))
}

// standings ranks rs on m and says who won and by how much, or which are
// within noise of the best (noiseRatio). An implementation that completed
// no cycle is said so, last.
func standings(m metric, rs ...*result) string {
	var ran, none []*result
	for _, r := range rs {
		if r.Acquired > 0 && m.value(r) > 0 {
			ran = append(ran, r)
		} else {
			none = append(none, r)
		}
	}
	slices.SortStableFunc(ran, func(a, b *result) int {
		switch va, vb := m.value(a), m.value(b); {
		case va == vb:
			return 0
		case (va > vb) == m.higher:
			return -1
		}
		return 1
	})
	var b strings.Builder
	if len(ran) == 0 {
		b.WriteString("no implementation completed a cycle")
	} else {
		best, n := ran[0], 1
		for n < len(ran) && m.lead(best, ran[n]) < noiseRatio {
			n++
		}
		if n == 1 {
			fmt.Fprintf(&b, "%s won on %s: %s", best.Impl, m.name, m.show(m.value(best)))
		} else {
			names, values := make([]string, n), make([]string, n)
			for i, r := range ran[:n] {
				names[i], values[i] = r.Impl, m.show(m.value(r))
			}
			fmt.Fprintf(&b, "%s within noise on %s: %s (%.2fx apart, under the %.2fx the tour counts as noise)",
				joinAnd(names), m.name, strings.Join(values, ", "), m.lead(best, ran[n-1]), noiseRatio)
		}
		for i, r := range ran[n:] {
			sep := ", "
			if i == 0 {
				sep = " against "
				if n == 2 {
					sep = "; both ahead of "
				} else if n > 2 {
					sep = "; all ahead of "
				}
			}
			fmt.Fprintf(&b, "%s%s's %s (%s)", sep, r.Impl, m.show(m.value(r)), fmtLead(m.lead(best, r)))
		}
	}
	for _, r := range none {
		fmt.Fprintf(&b, "; %s completed no cycle", r.Impl)
	}
	return b.String()
}

func fmtLead(x float64) string {
	if x >= 10 {
		return fmt.Sprintf("%.0fx", x)
	}
	return fmt.Sprintf("%.2fx", x)
}

func fmtRate(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func joinAnd(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// errorKind names what an error from a lock cycle was, from its value: the
// operation and, for a round that won no majority, why its nodes did not
// grant (a frozen node's timeout, another holder's value, a quarantine).
// Kinds are few and stable, so that a run's errors can be counted by kind.
func errorKind(err error) string {
	var q *redlock.QuorumError
	if errors.As(err, &q) {
		var whys []string
		for _, n := range q.Nodes {
			why := ""
			switch n.Outcome {
			case redlock.Granted, redlock.Unanswered:
				continue
			case redlock.Failed:
				why = errorCause(n.Err)
			default:
				why = n.Outcome.String()
			}
			if !slices.Contains(whys, why) {
				whys = append(whys, why)
			}
		}
		slices.Sort(whys)
		kind := q.Op + " without a majority"
		if q.Cause != nil && !errors.Is(q.Cause, redlock.ErrNotObtained) {
			kind += " (" + errorCause(q.Cause) + ")"
		}
		if len(whys) > 0 {
			kind += ": nodes " + strings.Join(whys, "; ")
		}
		return kind
	}
	switch {
	case errors.Is(err, redlock.ErrNotHeld):
		return "lock no longer held (its TTL ran out first)"
	case errors.Is(err, redsync.ErrLockAlreadyExpired):
		return "unlock: lock already expired"
	}
	return errorCause(err)
}

// errorCause is why one call failed, in a few words.
func errorCause(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "failed"
	case errors.Is(err, redlock.ErrClientStalled):
		return "late together (the client stalled)"
	case errors.Is(err, quorum.ErrNoReply), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "gave no reply within the timeout"
	case errors.Is(err, redlock.ErrNodeQuarantined):
		return "quarantined by the node guard"
	case errors.Is(err, redlock.ErrNotReplicated):
		return "not replicated in time"
	case errors.Is(err, redlock.ErrNoPermission):
		return "refused by an ACL"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		return "lost the connection"
	}
	s := err.Error()
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// errorSummary counts each implementation's errors and says, by kind, what
// they were: "none" where an implementation had none.
func errorSummary(rs []*result) string {
	if !slices.ContainsFunc(rs, func(r *result) bool { return r.Errors > 0 }) {
		return "no errors in any implementation"
	}
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		if r.Errors == 0 {
			parts = append(parts, r.Impl+" none")
			continue
		}
		kinds := slices.SortedFunc(maps.Keys(r.ErrorKinds), func(a, b string) int {
			if n, m := r.ErrorKinds[a], r.ErrorKinds[b]; n != m {
				return int(m - n)
			}
			return strings.Compare(a, b)
		})
		var each []string
		for _, k := range kinds {
			each = append(each, fmt.Sprintf("%d %s", r.ErrorKinds[k], k))
		}
		parts = append(parts, fmt.Sprintf("%s %d (%s)", r.Impl, r.Errors, strings.Join(each, "; ")))
	}
	return "errors: " + strings.Join(parts, ", ")
}
