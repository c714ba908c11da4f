package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// printHealth prints a Locker's view of its nodes (Locker.Health): what
// this implementation's node guard saw, and each node's settings.
func printHealth(w io.Writer, when string, im *impl) {
	if im.health == nil {
		return
	}
	fmt.Fprintf(w, "\n%s: node health %s\n", im.name, when)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\trtt\tfailures/min\tquarantine\tclock ppm\tjumps\treadings\tserver\trole\treplicas\tdurable")
	for _, h := range im.health() {
		quarantine := "-"
		if h.QuarantineLeft > 0 {
			quarantine = h.QuarantineLeft.Round(time.Millisecond).String()
		}
		clock := "-"
		switch {
		case h.ClockMeasured:
			clock = fmt.Sprintf("%+.1f±%.1f", h.ClockRatePPM, h.ClockRateErrPPM)
		case h.ClockSamples > 0:
			clock = "measuring"
		}
		durable := fmt.Sprint(h.Durability.Durable)
		if h.Durability.Err != nil {
			durable = "?"
		}
		server, role := h.Version, h.Role
		if h.Err != nil {
			server, role = "?", "?"
		}
		fmt.Fprintf(tw, "  %s\t%v\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%s\n", h.Name, fmtDur(h.RTT), h.Failures, quarantine, clock, h.ClockJumps, h.ClockSamples, server, role, h.Replicas, durable)
	}
	tw.Flush()
	for _, h := range im.health() {
		if h.QuarantineCause != "" {
			fmt.Fprintf(w, "  %s: quarantined: %s\n", h.Name, h.QuarantineCause)
		}
	}
}
