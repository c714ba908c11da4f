package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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
	// With no -impl: this library, the single-node floor and redsync side
	// by side, and a line on what in-process figures show.
	for _, impl := range allImpls {
		if !regexp.MustCompile(`(?m)^` + impl + `: `).MatchString(out) {
			t.Errorf("no %s table by default:\n%s", impl, out)
		}
	}
	table := strings.Index(out, "side by side")
	note := strings.Index(out, "note: embedded nodes share this process's CPU")
	if table < 0 || note < table || strings.Count(out[note:], "\n") != 1 {
		t.Errorf("want the side-by-side table, then the one-line note, at the end:\n%s", out)
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
		{[]string{"-impl", "zookeeper"}, `unknown implementation "zookeeper"`},
		{[]string{"-impl", "etcd", "-etcd", "0"}, "-etcd 0"},
		{[]string{"-impl", "etcd", "-mode", "do"}, "-mode do"},
		{[]string{"-fault", "freeze:leader@1s"}, "run -impl etcd alone"},
		{[]string{"-impl", "etcd", "-fault", "freeze:3@1s"}, "only 3 etcd members"},
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
		{[]string{"-server", "/usr/bin/redis-server"}, "-server /usr/bin/redis-server: only with -spawn"},
		{[]string{"-spawn", "1", "-server", "/nonexistent/redis-server"}, "-server: "},
		{[]string{"-tls-ca", "ca.pem"}, "only with -nodes"},
		{[]string{"-replicas", "1"}, "-replicas 1: only with -spawn"},
		{[]string{"-spawn", "1", "-replicas", "-1"}, "-replicas -1"},
		{[]string{"-wait-replicas", "-2"}, "-wait-replicas -2"},
		{[]string{"-nodes", "rediss://a:1", "-tls-cert", "c.pem"}, "give both or neither"},
		{[]string{"-nodes", "rediss://a:1", "-tls-ca", "/nonexistent/ca.pem"}, "-tls-ca: open /nonexistent/ca.pem"},
		{[]string{"-nodes", "rediss://a:1", "-tls-ca", "main_test.go"}, "no PEM certificate"},
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
	// The side-by-side table: a ratio column against redlock for each.
	if !regexp.MustCompile(`(?m)^redlock +\d+ +1\.00x .*\n^raw +\d+ +[0-9.]+x +\S+ +[0-9.]+x +\S+ +[0-9.]+x +0$`).MatchString(text) {
		t.Errorf("no side-by-side table with ratios:\n%s", text)
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

// -server chooses the binary -spawn starts, and the output names the server
// and version it reports: the host's redis-server, and every server that
// scripts/fetch-redis-server.sh has unpacked here (Redis 8.0, Valkey 8.1);
// the Locker's Health is printed before and after the run, for each.
func TestSpawnServer(t *testing.T) {
	host, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not on PATH; scripts/test.sh installs it")
	}
	servers := map[string]string{host: "redis 7.0."}
	dir := os.Getenv("REDLOCK_SERVERS_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "redlock", "servers")
	}
	for bin, want := range map[string]string{"redis-8.0/bin/redis-server": "redis 8.0.", "valkey-8.1/bin/valkey-server": "valkey 8.1."} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err == nil {
			servers[filepath.Join(dir, bin)] = want
		} else {
			t.Logf("%s not fetched (scripts/fetch-redis-server.sh): not tried", bin)
		}
	}
	for bin, want := range servers {
		out, err := runCLI(t, "-spawn", "1", "-server", bin, "-ops", "20", "-impl", "redlock", "-q")
		if err != nil {
			t.Fatalf("-server %s: %v\n%s", bin, err, out)
		}
		if !strings.Contains(out, bin+", "+want) || !strings.Contains(out, " 0 errors") {
			t.Errorf("-server %s: want it named with %q, and no errors:\n%s", bin, want, out)
		}
		checkHealthTables(t, out, strings.Fields(want)[1])
	}
}

// checkHealthTables checks the Locker's Health as a spawned run prints it:
// before the run, and after it with node 0's clock read (once per batch),
// no failure, no quarantine, no jump, on a master of the given version.
func checkHealthTables(t *testing.T, out, version string) {
	t.Helper()
	before := strings.Index(out, "redlock: node health before the run")
	after := strings.Index(out, "redlock: node health after the run")
	if before < 0 || after < before {
		t.Fatalf("no Health before and after the run:\n%s", out)
	}
	row := regexp.MustCompile(`node 0 \(127\.0\.0\.1:\d+\)\s+\S+\s+0\s+-\s+\S+\s+0\s+(\d+)\s+(.+?)\s+master`).FindStringSubmatch(out[after:])
	if row == nil {
		t.Fatalf("no healthy node 0 row after the run:\n%s", out[after:])
	}
	if readings, _ := strconv.Atoi(row[1]); readings < 1 || !strings.Contains(row[2], version) {
		t.Errorf("node 0 after 20 cycles: %s clock readings on server %s; want some on %s", row[1], row[2], version)
	}
}

// -replicas gives each spawned node replicas, and redlock-wait counts a
// grant once they acknowledged it (WAIT); without replicas (the control)
// every redlock-wait attempt fails as not replicated.
func TestSpawnReplicasAndWait(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not on PATH; scripts/test.sh installs it")
	}
	out, err := runCLI(t, "-spawn", "2", "-replicas", "1", "-impl", "redlock-wait", "-ops", "40", "-node-timeout", "2s", "-q")
	if err != nil || !strings.Contains(out, "each with 1 replica(s)") || !strings.Contains(out, "WAIT 1") || !strings.Contains(out, " 0 errors") {
		t.Fatalf("with replicas: %v\n%s", err, out)
	}
	if _, err := os.Stat("dump.rdb"); err == nil {
		t.Error("a spawned server wrote dump.rdb into the working directory")
	}
	out, err = runCLI(t, "-spawn", "2", "-impl", "redlock-wait", "-ops", "10", "-clients", "1", "-node-timeout", "400ms", "-q")
	if err != nil || !strings.Contains(out, "10 errors") || !strings.Contains(out, "not acknowledged by enough replicas") {
		t.Fatalf("without replicas: want every attempt to fail as not replicated; %v\n%s", err, out)
	}
}

// -nodes takes host:port and redis:// URLs (here with a password and a
// database); a rediss:// node behind a proxy keeps verifying the real host.
func TestRemoteNodes(t *testing.T) {
	// Two nodes: a majority needs both, and raw runs on the first, so every
	// cycle needs the password to have been used.
	secured, plain := miniredis.RunT(t), miniredis.RunT(t)
	secured.RequireAuth("secret")
	nodes := "redis://:secret@" + secured.Addr() + "/2," + plain.Addr()
	// Not a test of timing: no errors are allowed, so a NodeTimeout for a
	// loaded, race-instrumented machine rather than the 50ms default.
	out, err := runCLI(t, "-nodes", nodes, "-trust-nodes", "-ops", "20", "-keys", "2", "-impl", "redlock,raw", "-node-timeout", "5s")
	if err != nil || !strings.Contains(out, "2 Redis nodes given by -nodes") {
		t.Fatalf("run: %v\n%s", err, out)
	}
	for _, m := range regexp.MustCompile(`(\d+) acquired, \d+ contended, (\d+) errors`).FindAllStringSubmatch(out, -1) {
		if m[1] == "0" || m[2] != "0" {
			t.Errorf("%s acquired, %s errors on the given nodes:\n%s", m[1], m[2], out)
		}
	}

	d, err := newDeployment(t.Context(), config{nodes: []string{"rediss://:pw@127.0.0.1:6390/0"}, latency: []time.Duration{0}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	o := d.options[0]
	if o.Addr == "127.0.0.1:6390" || o.TLSConfig == nil || o.TLSConfig.ServerName != "127.0.0.1" || o.Password != "pw" {
		t.Errorf("through the proxy: addr %s, TLS %+v, password %q; want the proxy's address, ServerName 127.0.0.1, pw", o.Addr, o.TLSConfig, o.Password)
	}
}

// -spawn without redis-server on PATH says so, and starts nothing.
func TestSpawnWithoutRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := runCLI(t, "-spawn", "2")
	if err == nil || !strings.Contains(err.Error(), "redis-server not found on PATH") {
		t.Errorf("error %v; want one naming the missing redis-server", err)
	}
}

// Ctrl-C (the context ending) mid-run stops the spawned servers too.
func TestSpawnStopsOnInterrupt(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not on PATH; scripts/test.sh installs it")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, []string{"-spawn", "2", "-duration", "1h"}, &out, &out)
	if err == nil {
		t.Fatalf("run did not report the interruption\n%s", out.String())
	}
	if n := childServers(t); n != 0 {
		t.Errorf("%d redis-server children left running after the interruption", n)
	}
}

// childServers counts this process's redis-server children.
func childServers(t *testing.T) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range stats {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // it ended meanwhile
		}
		// pid (comm) state ppid ...
		s := string(data)
		comm := s[strings.IndexByte(s, '(')+1 : strings.LastIndexByte(s, ')')]
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if comm == "redis-server" && len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			n++
		}
	}
	return n
}

// The progress line goes to a terminal only, and says elapsed, cycles and rate.
func TestProgressLine(t *testing.T) {
	var w bytes.Buffer
	var done atomic.Int64
	done.Store(1234)
	stop := showProgress(&w, "redlock", time.Now(), &done)
	time.Sleep(700 * time.Millisecond)
	stop()
	if !regexp.MustCompile(`redlock: [0-9.]+m?s elapsed, 1234 cycles, [0-9]+/s`).MatchString(w.String()) {
		t.Errorf("progress line: %q", w.String())
	}
	out, err := runCLI(t, "-ops", "20") // stderr is a buffer here, not a terminal
	if err != nil || strings.Contains(out, "\r") {
		t.Errorf("a progress line went to a non-terminal: %v\n%q", err, out)
	}
}

// TestMain lets the test binary be an etcd member too: -impl etcd starts its
// members by running this program again.
func TestMain(m *testing.M) {
	runChild()
	os.Exit(m.Run())
}
