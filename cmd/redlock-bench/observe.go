package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/redlock/redlock/redlock"
)

// The observed variants of this library: the same Locker with an Observer,
// run beside plain redlock (no Observer) to measure what observation costs.
// Each counts the events it was told (printed with its table), and passes
// them on:
//
//	redlock-events  counting only: the cost of an Observer being there
//	                (each node's reply timed, the events built)
//	redlock-slog    NewLogObserver on a JSON handler at debug level: every
//	                event formatted into a line, written to io.Discard
//	redlock-slog-info  the same at info level, as production logs: the
//	                operations that went well are below it (one Enabled
//	                call), what went wrong is written
//	redlock-otel    the OpenTelemetry adapter on the SDK: a manual metric
//	                reader, and a tracer provider that samples and ends
//	                every span, handing them to a processor that drops them
//	                (what an exporter would be given; no export cost)
//	redlock-otel-1pct  the same with 1% of the traces sampled
//	                (ParentBased(TraceIDRatioBased(0.01)), a common
//	                production setting); every metric recorded
var observedImpls = map[string]string{
	"redlock-events":    "an Observer that counts the events",
	"redlock-slog":      "Observer NewLogObserver (JSON, debug level, to io.Discard)",
	"redlock-otel":      "Observer redlockotel (SDK meter with a manual reader; every span sampled, then dropped)",
	"redlock-slog-info": "Observer NewLogObserver (JSON, info level, to io.Discard)",
	"redlock-otel-1pct": "Observer redlockotel (SDK meter with a manual reader; 1% of traces sampled, then dropped)",
}

// eventCounter counts events by Op, and passes each to next (if any).
type eventCounter struct {
	counts [32]atomic.Int64 // by Op; Ops() are far fewer
	next   redlock.Observer
	// tripsTo is next where it also hears of round trips (the
	// OpenTelemetry adapter): the Locker's Observer is then a tripCounter,
	// which counts them and passes them on.
	tripsTo             redlock.RoundTripObserver
	trips, tripsCarried atomic.Int64 // round trips, and the commands they carried
	// flush records what next has queued and not yet recorded (the
	// OpenTelemetry adapter records off the lock's path); nil where next
	// records as it observes.
	flush func()
}

func (c *eventCounter) Observe(e redlock.Event) {
	if int(e.Op) < len(c.counts) {
		c.counts[e.Op].Add(1)
	}
	if c.next != nil {
		c.next.Observe(e)
	}
}

// observer is the Locker's Observer: c, or where next hears of round
// trips, c as a tripCounter (a wrapper that had only Observe would keep
// them from it).
func (c *eventCounter) observer() redlock.Observer {
	if c.tripsTo != nil {
		return tripCounter{c}
	}
	return c
}

// tripCounter is an eventCounter that passes round trips on too.
type tripCounter struct{ *eventCounter }

func (c tripCounter) ObserveRoundTrip(t redlock.RoundTrip) {
	c.trips.Add(1)
	c.tripsCarried.Add(int64(t.Commands))
	c.tripsTo.ObserveRoundTrip(t)
}

// Keys of snapshot's counts that are not Ops.
const (
	roundTripsKey   = "round trips"
	tripCommandsKey = "round-trip commands"
)

// snapshot returns the counts so far, by Op (and the round trips', where
// counted).
func (c *eventCounter) snapshot() map[string]int64 {
	out := map[string]int64{}
	if c.tripsTo != nil {
		out[roundTripsKey], out[tripCommandsKey] = c.trips.Load(), c.tripsCarried.Load()
	}
	for _, op := range redlock.Ops() {
		if int(op) < len(c.counts) {
			if n := c.counts[op].Load(); n > 0 {
				out[op.String()] = n
			}
		}
	}
	return out
}

// observerFor returns the Observer of an observed implementation, wrapped in
// the counter.
func observerFor(name string) (*eventCounter, error) {
	c := &eventCounter{}
	switch name {
	case "redlock-events":
		return c, nil
	case "redlock-slog", "redlock-slog-info":
		level := slog.LevelDebug
		if name == "redlock-slog-info" {
			level = slog.LevelInfo
		}
		c.next = redlock.NewLogObserver(slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: level})))
		return c, nil
	}
	if setUp, ok := taggedObservers[name]; ok { // the OpenTelemetry variants (observe_otel.go)
		if err := setUp(c); err != nil {
			return nil, err
		}
		return c, nil
	}
	return nil, fmt.Errorf("unknown observed implementation %q", name)
}

// formatEvents is the event counts of a run, in Ops() order.
func formatEvents(counts map[string]int64) string {
	var parts []string
	for _, op := range redlock.Ops() {
		if n, ok := counts[op.String()]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", op, n))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "none")
	}
	line := strings.Join(parts, ", ")
	if trips, ok := counts[roundTripsKey]; ok {
		line += fmt.Sprintf("; round trips %d, carrying %d commands", trips, counts[tripCommandsKey])
	}
	return line
}
