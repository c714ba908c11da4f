package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, &out, &errOut)
	return out.String() + errOut.String(), err
}

func TestEmbeddedDefaultRun(t *testing.T) {
	out, err := runCLI(t, "-duration", "300ms", "-clients", "2", "-keys", "2")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "embedded in-process Redis nodes") {
		t.Errorf("output does not say what it ran against:\n%s", out)
	}
	m := regexp.MustCompile(`(\d+) acquired`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" {
		t.Errorf("no lock acquired:\n%s", out)
	}
	for _, row := range []string{"acquire", "release", "cycle"} {
		if !regexp.MustCompile(`(?m)^  ` + row + ` `).MatchString(out) {
			t.Errorf("no %s row:\n%s", row, out)
		}
	}
}

func TestFlagValidation(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-clients", "0"}, "-clients 0"},
		{[]string{"-keys", "-1"}, "-keys -1"},
		{[]string{"-embedded", "0"}, "-embedded 0"},
		{[]string{"-ttl", "0s"}, "-ttl 0s"},
		{[]string{"-hold", "-1s"}, "-hold -1s"},
		{[]string{"-hold", "10s", "-ttl", "5s"}, "shorter than -ttl"},
		{[]string{"-duration", "0s"}, "-duration 0s"},
		{[]string{"-ops", "-3"}, "-ops -3"},
		{[]string{"-mode", "grab"}, `-mode "grab"`},
		{[]string{"-impl", "etcd"}, `unknown implementation "etcd"`},
		{[]string{"-node-latency", "1ms,2ms"}, "2 delays for 5 nodes"},
		{[]string{"-node-latency", "1ms,fast"}, "-node-latency"},
		{[]string{"-fault", "melt:1@1s"}, "want freeze:K@T"},
		{[]string{"-fault", "freeze:9@1s"}, "only 5 nodes"},
		{[]string{"-fault", "freeze:1@soon"}, "bad time"},
		{[]string{"-nodes", "a:1", "-spawn", "3"}, "give one of them"},
		{[]string{"-nodes", "nohostport"}, "want host:port"},
		{[]string{"-nodes", "redis://[bad"}, "-nodes"},
		{[]string{"-node-timeout", "-1s"}, "-node-timeout"},
		{[]string{"-rounds", "0"}, "-rounds 0"},
		{[]string{"-rounds", "5", "-ops", "3"}, "fewer cycles than -rounds"},
		{[]string{"-rounds", "100", "-duration", "500ms"}, "under 10ms per round"},
		{[]string{"-rounds", "2", "-fault", "freeze:1@1s"}, "one continuous run"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-bogus"}, "flag provided but not defined"},
	} {
		out, err := runCLI(t, tt.args...)
		if err == nil {
			t.Errorf("%v: no error", tt.args)
			continue
		}
		if !strings.Contains(err.Error()+out, tt.want) {
			t.Errorf("%v: error %q; want %q", tt.args, err, tt.want)
		}
	}
}

// -rounds interleaves the implementations and merges each one's shares:
// the cycle counts add up to -ops, and the output says it.
func TestRounds(t *testing.T) {
	out, err := runCLI(t, "-json", "-ops", "61", "-rounds", "3", "-clients", "2", "-keys", "2", "-impl", "redlock,raw")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	var rep struct {
		Results []struct {
			Impl             string
			Cycles, Acquired int64
			AllocsPerCycle   float64                     `json:"allocs_per_cycle"`
			Latency          map[string]map[string]int64 `json:"latency_ns"`
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	for _, r := range rep.Results {
		if r.Cycles != 61 || r.Acquired == 0 || r.AllocsPerCycle <= 0 || r.Latency["cycle"]["p50"] <= 0 {
			t.Errorf("%s: %+v", r.Impl, r)
		}
	}
	text, err := runCLI(t, "-ops", "20", "-rounds", "2", "-impl", "redlock,raw")
	if err != nil || !strings.Contains(text, "in 2 interleaved rounds") || strings.Count(text, "cycles/s;") != 2 {
		t.Errorf("run: %v\n%s", err, text)
	}
}

func TestJSONAndPlot(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "cdf.svg")
	out, err := runCLI(t, "-json", "-ops", "60", "-clients", "3", "-keys", "3", "-impl", "redlock,raw,redsync-failfast", "-fencing", "-plot", svg)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	var rep struct {
		Nodes   string
		Results []struct {
			Impl         string
			Acquired     int64
			Cycles       int64
			CyclesPerSec float64                     `json:"cycles_per_sec"`
			Latency      map[string]map[string]int64 `json:"latency_ns"`
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(rep.Results) != 3 || rep.Results[0].Impl != "redlock" || rep.Results[2].Impl != "redsync-failfast" {
		t.Fatalf("results: %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if r.Cycles != 60 || r.Acquired == 0 || r.CyclesPerSec <= 0 || r.Latency["cycle"]["p50"] <= 0 {
			t.Errorf("%s: %+v", r.Impl, r)
		}
		if r.Latency["cycle"]["p50"] > r.Latency["cycle"]["p99"] || r.Latency["cycle"]["p99"] > r.Latency["cycle"]["max"] {
			t.Errorf("%s: percentiles out of order: %v", r.Impl, r.Latency["cycle"])
		}
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(data, new(struct{ XMLName xml.Name })); err != nil {
		t.Fatalf("the plot is not well-formed XML: %v", err)
	}
	if n := strings.Count(string(data), "<polyline"); n != 3 {
		t.Errorf("%d curves in the plot, want 3", n)
	}
}

// A frozen node (through the fault proxy) must not stop redlock.
func TestLatencyAndFaults(t *testing.T) {
	out, err := runCLI(t, "-duration", "600ms", "-keys", "4", "-node-latency", "0s,0s,1ms,1ms,20ms", "-fault", "freeze:0@100ms+300ms,stop:1@200ms", "-node-timeout", "100ms")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "behind delay proxies (0s,0s,1ms,1ms,20ms each way)") {
		t.Errorf("output does not describe the proxies:\n%s", out)
	}
	m := regexp.MustCompile(`(\d+) acquired`).FindStringSubmatch(out)
	if n, _ := strconv.Atoi(m[1]); n < 10 {
		t.Errorf("only %d cycles with one node frozen and one stopped:\n%s", n, out)
	}
}

func TestSpawnCleansUp(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not on PATH; scripts/test.sh installs it")
	}
	out, err := runCLI(t, "-spawn", "3", "-ops", "30", "-keys", "3")
	if err != nil || !strings.Contains(out, "3 local redis-server processes") {
		t.Fatalf("run: %v\n%s", err, out)
	}

	// The deployment itself: servers answer while it is open, and are gone
	// (port closed) once it is closed.
	d, err := newDeployment(t.Context(), config{spawn: 2})
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, o := range d.options {
		c := redis.NewClient(&redis.Options{Addr: o.Addr, MaxRetries: -1})
		if err := c.Ping(t.Context()).Err(); err != nil {
			t.Errorf("spawned %s does not answer: %v", o.Addr, err)
		}
		c.Close()
		addrs = append(addrs, o.Addr)
	}
	d.close()
	for _, a := range addrs {
		if conn, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after cleanup", a)
		}
	}
}
