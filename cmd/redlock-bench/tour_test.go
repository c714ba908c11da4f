package main

import (
	"math"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
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

// fakeResult is an implementation's result as the tour's words see it:
// perSec cycles a second over 10 s, a cycle p50, refused attempts, errors.
func fakeResult(impl string, perSec float64, p50 time.Duration, refused int64, errs ...error) *result {
	r := &result{Impl: impl, Elapsed: 10 * time.Second, Acquired: int64(math.Round(perSec * 10)), Contended: refused, cycle: newHist()}
	if r.Acquired > 0 {
		r.cycle.record(p50)
	}
	for _, err := range errs {
		r.Errors++
		r.addKinds(map[string]int64{errorKind(err): 1})
	}
	return r
}

// tourStep is the tour's scenario whose title begins with prefix.
func tourStep(t *testing.T, prefix string) scenario {
	t.Helper()
	i := slices.IndexFunc(tourScenarios, func(sc scenario) bool { return strings.HasPrefix(sc.title, prefix) })
	if i < 0 {
		t.Fatalf("no tour scenario %q", prefix)
	}
	return tourScenarios[i]
}

// The tour's words follow its numbers: fed contrary figures, each
// conclusion names the winner the figures give, says "within noise" where
// they are less than noiseRatio apart, and counts each implementation's
// errors by kind, or says there were none.
func TestTourWordsFollowTheNumbers(t *testing.T) {
	frozen := &redlock.QuorumError{Op: "acquire", Key: "k", Need: 3, Granted: 2, Nodes: []redlock.NodeResult{
		{Outcome: redlock.Granted}, {Outcome: redlock.Granted}, {Outcome: redlock.Taken},
		{Outcome: redlock.Failed, Err: quorum.ErrNoReply}, {Outcome: redlock.Failed, Err: quorum.ErrNoReply},
	}}
	readTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name, scenario string
		results        []*result
		want, not      []string
	}{{
		name:     "redsync-failfast faster on a frozen node",
		scenario: "a frozen node",
		results: []*result{
			fakeResult("redlock", 344, 7500*time.Microsecond, 0, frozen, frozen, frozen, readTimeout),
			fakeResult("redsync", 0.4, 10030*time.Millisecond, 0),
			fakeResult("redsync-failfast", 710, 3060*time.Microsecond, 0),
		},
		want: []string{"redsync-failfast won on cycles/s: 710 against redlock's 344 (2.06x)", "redsync waited out a timeout",
			"errors: redlock 4 (3 acquire without a majority: nodes gave no reply within the timeout; held by another value; 1 gave no reply within the timeout), redsync none, redsync-failfast none"},
		not: []string{"keeps up", "redlock won", "within noise"},
	}, {
		name:     "this library faster on a frozen node",
		scenario: "a frozen node",
		results: []*result{
			fakeResult("redlock", 1347, 700*time.Microsecond, 0),
			fakeResult("redsync", 0.1, 10020*time.Millisecond, 0),
			fakeResult("redsync-failfast", 943, 999*time.Microsecond, 0),
		},
		want: []string{"redlock won on cycles/s: 1347 against redsync-failfast's 943 (1.43x), redsync's 0.1 (13470x)", "no errors in any implementation"},
		not:  []string{"redsync-failfast won", "errors:"},
	}, {
		name:     "within noise on a frozen node",
		scenario: "a frozen node",
		results: []*result{
			fakeResult("redlock", 700, 5*time.Millisecond, 0),
			fakeResult("redsync", 0.4, 10*time.Second, 0),
			fakeResult("redsync-failfast", 680, 5*time.Millisecond, 0),
		},
		want: []string{"redlock and redsync-failfast within noise on cycles/s: 700, 680 (1.03x apart", "; both ahead of redsync's 0.4"},
		not:  []string{" won "},
	}, {
		name:     "plain redsync faster than fail-fast under load",
		scenario: "load",
		results: []*result{
			fakeResult("redlock", 1000, time.Millisecond, 0),
			fakeResult("raw", 5000, time.Millisecond, 0),
			fakeResult("redsync", 2278, time.Millisecond, 0),
			fakeResult("redsync-failfast", 1400, time.Millisecond, 0),
		},
		want: []string{"redsync won on cycles/s: 2278 against redsync-failfast's 1400 (1.63x), redlock's 1000 (2.28x)"},
		not:  []string{"faster mode", "redlock won"},
	}, {
		name:     "both redsyncs within noise, ahead of this library, under contention",
		scenario: "contention",
		results: []*result{
			fakeResult("redlock", 1000, time.Millisecond, 3000, readTimeout),
			fakeResult("raw", 5000, time.Millisecond, 9000),
			fakeResult("redsync", 2278, time.Millisecond, 4000),
			fakeResult("redsync-failfast", 2140, time.Millisecond, 4000),
		},
		want: []string{"redsync and redsync-failfast within noise on granted cycles/s: 2278, 2140 (1.06x apart", "; both ahead of redlock's 1000 (2.28x)",
			"errors: redlock 1 (1 gave no reply within the timeout), raw none"},
		not: []string{" won "},
	}, {
		name:     "redsync's p50 shorter in the zones",
		scenario: "zones",
		results: []*result{
			fakeResult("redlock", 20, 204*time.Millisecond, 0),
			fakeResult("raw", 70, 13*time.Millisecond, 0),
			fakeResult("redsync", 70, 14*time.Millisecond, 0),
		},
		want: []string{"redsync won on cycle p50", "redlock's p50 is over the 50 ms node's 100ms round trip"},
		not:  []string{"redlock won", "redlock's p50 is under"},
	}, {
		name:     "this library's p50 shorter in the zones",
		scenario: "zones",
		results: []*result{
			fakeResult("redlock", 70, 14*time.Millisecond, 0),
			fakeResult("raw", 70, 13*time.Millisecond, 0),
			fakeResult("redsync", 5, 204*time.Millisecond, 0),
		},
		want: []string{"redlock won on cycle p50", "redlock's p50 is within noise of the floor's", "redsync's p50 is over the 50 ms node's", "redlock's p50 is under the 50 ms node's 100ms round trip: it decides without that node"},
		not:  []string{"redsync won"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tourStep(t, tt.scenario).conclusion(tt.results)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("no %q in:\n%s", w, got)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("%q in:\n%s", n, got)
				}
			}
		})
	}
}
