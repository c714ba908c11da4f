package main

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// shortTour makes the tour's scenarios short, for the test, and restores
// them after.
func shortTour(t *testing.T) {
	t.Helper()
	saved := tourScenarios
	t.Cleanup(func() { tourScenarios = saved })
	short := make([]scenario, len(saved))
	for i, sc := range saved {
		sc.args = slices.Clone(sc.args)
		for j := 0; j+1 < len(sc.args); j++ {
			switch sc.args[j] {
			case "-duration":
				sc.args[j+1] = "400ms"
			case "-rounds":
				sc.args[j+1] = "2"
			}
		}
		short[i] = sc
	}
	tourScenarios = short
}

// No flags at all run the tour: each scenario's table with the floor and
// redsync, the flags that repeat it, and its conclusion; then the
// conclusions together.
func TestNoFlagsRunTheTour(t *testing.T) {
	shortTour(t)
	for _, args := range [][]string{nil, {"-tour", "-q"}} {
		out, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
		if got := strings.Count(out, "\n-> "); got != len(tourScenarios) {
			t.Errorf("%q: %d conclusions for %d scenarios:\n%s", args, got, len(tourScenarios), out)
		}
		for _, want := range []string{"== 1/4 zones", "== 2/4 a frozen node", "== 3/4 load: 16 clients", "== 4/4 contention", "in short:", "redlock-bench -node-latency 1ms,2ms,3ms,4ms,50ms"} {
			if !strings.Contains(out, want) {
				t.Errorf("%q: no %q:\n%s", args, want, out)
			}
		}
		for _, impl := range []string{"redlock", "raw", "redsync"} {
			if !regexp.MustCompile(`(?m)^ *` + impl + ` +\d+ `).MatchString(out) {
				t.Errorf("%q: no %s row:\n%s", args, impl, out)
			}
		}
		if strings.Contains(out, "NaN") || strings.Contains(out, "+Inf") {
			t.Errorf("%q: a conclusion divided by nothing:\n%s", args, out)
		}
	}
}

func TestTourTakesNoWorkloadFlags(t *testing.T) {
	out, err := runCLI(t, "-tour", "-clients", "3")
	if err == nil || !strings.Contains(err.Error(), "-tour takes no other flag") || !strings.Contains(err.Error(), "-clients") {
		t.Fatalf("want a clear error naming -clients, got %v\n%s", err, out)
	}
}

// The observed variants print the events of their run; plain redlock has
// no Observer and prints none. The OpenTelemetry ones are tested where
// they are built (-tags otel, as scripts/test.sh does).
func TestObservedImplsPrintEventCounts(t *testing.T) {
	var observed, otel []string
	for _, name := range []string{"redlock-events", "redlock-slog", "redlock-slog-info", "redlock-otel", "redlock-otel-1pct"} {
		if !built(name) {
			t.Logf("%s: not in this build (-tags %s)", name, optionalImpls[name].tag)
			continue
		}
		observed = append(observed, name)
		if strings.HasPrefix(name, "redlock-otel") {
			otel = append(otel, name)
		}
	}
	out, err := runCLI(t, "-q", "-duration", "300ms", "-clients", "2", "-keys", "1", "-impl", "redlock,"+strings.Join(observed, ","))
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	events := regexp.MustCompile(`(?m)^  events: acquire (\d+), unlock (\d+)`).FindAllStringSubmatch(out, -1)
	if len(events) != len(observed) {
		t.Fatalf("want event counts for the %d observed variants:\n%s", len(observed), out)
	}
	acquired := regexp.MustCompile(`(?m)^(redlock[a-z0-9-]*): .*\n  \d+ cycles/s; (\d+) acquired, (\d+) contended, (\d+) errors`).FindAllStringSubmatch(out, -1)
	if len(acquired) != len(observed)+1 {
		t.Fatalf("want %d tables:\n%s", len(observed)+1, out)
	}
	for i, e := range events {
		a := acquired[i+1] // the observed ones, in order after redlock
		got, _ := strconv.Atoi(a[2])
		busy, _ := strconv.Atoi(a[3])
		errs, _ := strconv.Atoi(a[4])
		acq, _ := strconv.Atoi(e[1])
		unl, _ := strconv.Atoi(e[2])
		// A failed cycle may be an acquisition that failed, or one that
		// succeeded and whose Unlock failed (then it has an unlock event).
		if acq != got+busy+errs || unl < got || unl > got+errs {
			t.Errorf("%s: %d acquire and %d unlock events for %d acquired, %d contended and %d failed cycles", a[1], acq, unl, got, busy, errs)
		}
	}
	// The OpenTelemetry variants hear of every round trip (the adapter is a
	// RoundTripObserver, and the counter passes them on); the others do not.
	trips := regexp.MustCompile(`(?m)^  events: acquire (\d+), .*; round trips (\d+), carrying (\d+) commands$`).FindAllStringSubmatch(out, -1)
	if len(trips) != len(otel) {
		t.Fatalf("want round-trip counts for the OpenTelemetry variants alone (%d in this build):\n%s", len(otel), out)
	}
	for _, m := range trips {
		acq, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		carried, _ := strconv.Atoi(m[3])
		if n == 0 || carried < n || carried < acq {
			t.Errorf("%d round trips carrying %d commands, for %d acquisitions", n, carried, acq)
		}
	}
	if strings.Contains(strings.Split(out, "\nredlock-events:")[0], "events:") {
		t.Errorf("plain redlock prints events:\n%s", out)
	}
}
