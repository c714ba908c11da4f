// Command redlock-bench measures what a Redlock lock cycle (acquire, hold,
// release) costs on a set of Redis nodes, and how it behaves when a node is
// slow or gone, side by side with what teams would otherwise use.
//
// With no flags at all (or -tour) it runs the tour, about a minute on five
// in-process Redis nodes (miniredis, real Lua), so that it works on a machine
// with nothing installed: four scenarios where lock implementations differ,
// each run through this library, the single-node floor and redsync side by
// side, each printed with the flags that repeat it and one line, computed
// from its figures, on what it shows:
//
//	zones         nodes 1, 2, 3, 4 and 50 ms away: a majority decides
//	frozen node   node 4 answers nothing: what a silent node costs each cycle
//	load          16 clients on 16 keys: CPU and allocations per cycle
//	contention    4 clients on one key, trylock: granted cycles per second
//
//	go run ./cmd/redlock-bench
//
// Any flag runs one workload instead, as below (with no -impl: this
// library, the floor, redsync and redsync-failfast), ending with a
// side-by-side table.
//
// Nodes (one of):
//
//	-nodes a:6379,b:6379      real nodes: host:port, or redis:// and rediss:// URLs
//	-trust-nodes              call Locker.TrustNodes on the -nodes first: only for
//	                          nodes known to hold no locks (nodes this run
//	                          starts are always trusted)
//	                          (rediss://user:password@host:port for TLS and an ACL user)
//	-tls-ca F, -tls-cert F, -tls-key F
//	                          rediss:// nodes: a private CA, a client certificate and its key
//	-spawn N                  start N local redis-server processes on free 127.0.0.1 ports;
//	                          they are stopped on exit, Ctrl-C included
//	-replicas R               with -spawn: R replicas of each node (for -impl redlock-wait)
//	-server PATH              with -spawn: the server to start (a valkey-server, or a wrapper
//	                          from scripts/fetch-redis-server.sh); the output names its version
//	-embedded N               in-process nodes (the default, 5)
//
// Workload:
//
//	-clients N      concurrent clients (4)
//	-lockers N      this library: spread the clients over N Lockers, each with
//	                connections of its own, as N processes (1)
//	-keys N         distinct lock names; 1 makes every client contend (1)
//	-ttl D          lock TTL (10s)
//	-hold D         time inside the critical section (0)
//	-duration D     how long each implementation runs (2s), or
//	-ops N          how many cycles each implementation runs
//	-rounds K       run the implementations in turn K times, each for a share
//	                of -duration or -ops, and merge the shares (1): on a noisy
//	                machine this puts them under the same noise. Short turns
//	                cancel it best: on a shared 2-vCPU VM, one implementation
//	                run against itself differed by up to 5% in 2 s turns and
//	                by 1% or less in 100 ms turns (-duration 30s -rounds 300).
//	                Rounds after the first run in shuffled orders, the same
//	                in every run; a turn's time includes its Observer's
//	                queued recording
//	-mode M         trylock (one attempt per cycle), lock (wait), or do (Locker.Do)
//	-fencing        issue fencing tokens
//	-key-prefix P   lock names begin with P (redlock-bench:), to match an ACL user's key patterns
//	-node-timeout D redlock's per-node timeout (library default 50ms)
//	-no-autopipeline       redlock sends each command on a pooled connection (Options.NoAutoPipeline)
//	-goredis-autopipeline  redlock gets go-redis AutoPipeline clients instead
//	-cpuprofile F   write a CPU profile of the runs (go tool pprof)
//
// Deployment models and faults (through a TCP proxy in front of each node;
// freeze-replica signals the replica processes instead):
//
//	-node-latency 1ms,2ms,3ms,4ms,50ms   one-way delay per node, to model zones
//	-fault freeze:4@1s+2s,stop:3@2s      freeze node 4 at 1s for 2s (it keeps
//	                                     connections, answers nothing); stop node 3 at 2s
//	-fault freeze-replica:0@0s           with -spawn and -replicas: freeze node 0's
//	                                     replicas (SIGSTOP) from the start: node 0
//	                                     answers, but every WAIT of redlock-wait on
//	                                     it runs to its timeout
//
// Implementations (-impl, comma-separated, or all: the default), run in turn
// on the same nodes with the same workload, each on clients of its own with a
// connection already dialled (this library's Locker is warmed with
// Locker.Warm):
//
//	redlock            this library
//	redlock-nowake     this library with Options.NoWakeUps: waiters in other
//	                   Lockers hear releases at their polls only (not in all)
//	redlock-fenced     this library with Options.Fencing, whatever -fencing
//	                   says: beside redlock, what tokens cost (not in all)
//	redlock-direct     this library with Options.NoAutoPipeline (a pooled
//	                   connection and goroutine per command; not in all)
//	redlock-wait       this library with Options.WaitReplicas -wait-replicas
//	                   (1), and Options.WaitAOF with -wait-aof; give the nodes
//	                   replicas with -spawn N -replicas 1 (not in all)
//	redlock-unguarded  this library with Options.NoQuarantine: the node
//	                   guard off, no companions sent (not in all)
//	redlock-events, redlock-slog, redlock-slog-info, redlock-otel, redlock-otel-1pct
//	                   this library with an Observer: one that counts the
//	                   events; the slog adapter (JSON, discarded) at debug
//	                   and at info; the OpenTelemetry adapter on the SDK
//	                   (every span sampled, or 1% of traces; dropped);
//	                   each prints the run's event counts (and the
//	                   OpenTelemetry ones its round trips, with the
//	                   commands they carried) (not in all; the
//	                   OpenTelemetry ones built with -tags otel only)
//	redlock-pair, redlock-pair-seq
//	                   this library locking two keys a cycle (the key and
//	                   KEY:pair): in one multi-key lease (TryLockMulti), or
//	                   one TryLock after the other (not in all)
//	raw                SET NX PX + compare-and-delete on one node: the floor
//	                   (the third-fastest node under -node-latency)
//	redsync            github.com/go-redsync/redsync/v4, defaults
//	redsync-failfast   redsync with WithFailFast(true)
//	etcd               etcd's concurrency.Mutex (go.etcd.io/etcd/client/v3), its
//	                   grant's revision the fencing token, on an etcd cluster
//	                   this command starts: -etcd N members (3), each this
//	                   program run again as a child process on loopback ports
//	                   (embedded etcd server), so that -fault can freeze one;
//	                   -etcd-timeout D bounds each attempt, release and
//	                   session grant (1s); -fault freeze:leader@T+D (or
//	                   follower) freezes the member that leads (or follows)
//	                   when the fault begins (not in all; not with -mode do;
//	                   built with -tags etcd only, as below)
//
// Output: a table per implementation (cycles/s, acquired/contended/error
// counts, allocations per cycle, acquire/release/cycle latency percentiles
// from log-linear histograms), a side-by-side comparison, -json for
// machines, -plot FILE.svg for a latency CDF, and a live progress line on a
// terminal unless -q. Each table says the longest time in the run when no
// client was granted a lock: what a fault cost in availability. The exit
// status is non-zero on bad flags or failure.
//
// It runs in Go's FIPS 140-3 "only" mode too (GODEBUG=fips140=only
// go run ./cmd/redlock-bench), where SHA-1 panics: no client here computes
// a script's digest, and the in-process nodes, which stand in for Redis
// servers, compute theirs inside crypto/fips140.WithoutEnforcement.
//
// This command is a module of its own (cmd/redlock-bench/go.mod), so that
// etcd, its gRPC and redsync stay out of the library's module graph; the
// repository's go.work lets `go run ./cmd/redlock-bench` work from the root.
// Its default build leaves out -impl etcd and the OpenTelemetry variants,
// whose dependencies (etcd's server, gRPC, the OpenTelemetry SDK) would
// take a fresh machine minutes to fetch and compile before the tour could
// start; asked for one, it says so and how to get it. Build tags bring them
// in:
//
//	go run -tags etcd ./cmd/redlock-bench -impl redlock,etcd
//	go run -tags otel ./cmd/redlock-bench -impl redlock,redlock-otel
//	go build -tags etcd,otel ./cmd/redlock-bench    # every implementation
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"
)

func main() {
	runChild() // a member started by -impl etcd does not return
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "redlock-bench:", err)
		}
		os.Exit(2)
	}
}

// runChild runs this program as the child process the environment asks
// for (childMains), if it asks for one, and exits with its status.
func runChild() {
	for env, child := range childMains {
		if spec := os.Getenv(env); spec != "" {
			os.Exit(child(spec))
		}
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if cfg.tour || len(args) == 0 {
		return runTour(ctx, cfg, stdout, stderr)
	}
	out := stdout
	if cfg.jsonOut {
		out = io.Discard
	}
	m, err := measure(ctx, cfg, out, stderr)
	if err != nil {
		return err
	}
	defer m.close()
	for _, r := range m.results {
		printTable(out, r)
	}
	printComparison(out, m.results)
	for _, im := range m.impls {
		printHealth(out, "after the run", im)
	}
	if len(cfg.nodes) == 0 && cfg.spawn == 0 && slices.ContainsFunc(cfg.impls, func(s string) bool { return s != "etcd" }) {
		fmt.Fprintln(out, "\nnote: embedded nodes share this process's CPU: compare client-side cost (CPU, allocs/cycle) here, not latency;"+
			" -spawn N [-server PATH] or -nodes give real servers, -node-latency a network")
	}

	if cfg.plot != "" {
		f, err := os.Create(cfg.plot)
		if err != nil {
			return err
		}
		if err := writePlot(f, m.describe+"\n"+m.workload, m.results); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nlatency CDF written to %s\n", cfg.plot)
	}
	if cfg.jsonOut {
		return writeJSON(stdout, m.describe, cfg, m.results)
	}
	return nil
}

// measurement is one run of cfg's implementations on one deployment.
type measurement struct {
	describe, workload string
	impls              []*impl
	results            []*result // by impl
	close              func()    // stops the deployment
}

// measure starts cfg's deployment and runs each implementation on it (in
// turn, in cfg.rounds interleaved shares); the caller stops the deployment
// (measurement.close) once done with the Lockers' health. It prints the
// deployment, the workload and each Locker's health before the run to out.
func measure(ctx context.Context, cfg config, out, stderr io.Writer) (_ *measurement, err error) {
	d := &deployment{describe: fmt.Sprintf("no Redis nodes; %d etcd member(s) started as child processes on loopback", cfg.etcdMembers)}
	if slices.ContainsFunc(cfg.impls, func(s string) bool { return s != "etcd" }) {
		if d, err = newDeployment(ctx, cfg); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			d.close()
		}
	}()

	var progress io.Writer
	if !cfg.quiet && !cfg.jsonOut && isTerminal(stderr) {
		progress = stderr
	}
	workload := fmt.Sprintf("%d clients, %d keys, ttl %v, hold %v, mode %s", cfg.clients, cfg.keys, cfg.ttl, cfg.hold, cfg.mode)
	if cfg.ops > 0 {
		workload += fmt.Sprintf(", %d cycles each", cfg.ops)
	} else {
		workload += fmt.Sprintf(", %v each", cfg.duration)
	}
	if cfg.rounds > 1 {
		workload += fmt.Sprintf(", in %d interleaved rounds", cfg.rounds)
	}
	fmt.Fprintf(out, "redlock-bench: %s\nworkload: %s\n", d.describe, workload)

	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	m := &measurement{describe: d.describe, workload: workload, impls: make([]*impl, len(cfg.impls)), close: d.close}
	for i, name := range cfg.impls {
		if m.impls[i], err = newImpl(ctx, name, d, cfg); err != nil {
			return nil, err
		}
		if m.impls[i].warning != "" {
			fmt.Fprintf(stderr, "redlock-bench: %s: %s\n", name, m.impls[i].warning)
		}
		printHealth(out, "before the run", m.impls[i])
	}
	share := cfg // one round's share of the run
	share.duration /= time.Duration(cfg.rounds)
	share.ops /= cfg.rounds
	m.results = make([]*result, len(m.impls))
	for round := range cfg.rounds {
		for _, i := range turnOrder(round, len(m.impls)) {
			im := m.impls[i]
			if round == cfg.rounds-1 && cfg.ops > 0 {
				share.ops = cfg.ops - (cfg.rounds-1)*(cfg.ops/cfg.rounds)
			}
			faultCtx, cancelFaults := context.WithCancel(ctx)
			var faultsMu sync.Mutex
			var faults []string
			report := func(s string) {
				faultsMu.Lock()
				defer faultsMu.Unlock()
				faults = append(faults, s)
			}
			if im.inject != nil {
				im.inject(faultCtx, cfg.faults, report)
			} else {
				d.inject(faultCtx, cfg.faults, report)
			}
			commandsBefore := d.nodeCommands(ctx)
			r := bench(ctx, im, share, progress)
			if after := d.nodeCommands(ctx); commandsBefore >= 0 && after >= 0 {
				r.NodeCommands = after - commandsBefore
			} else {
				r.NodeCommands = -1
			}
			cancelFaults()
			d.injecting.Wait() // undone before the next implementation's run
			faultsMu.Lock()
			r.Faults = faults
			faultsMu.Unlock()
			if m.results[i] == nil {
				m.results[i] = r
			} else {
				m.results[i].merge(r)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	for i, im := range m.impls {
		if im.events != nil {
			m.results[i].Events = im.events()
		}
	}
	return m, nil
}

// turnOrder is the order of the implementations' turns in round (of
// n implementations): as given in the first round, shuffled in the others
// (the same shuffles in every run), so that what a turn leaves behind
// (garbage to collect, caches, the servers' state) falls on each
// implementation alike, not always on the one listed after it.
func turnOrder(round, n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	if round > 0 {
		r := rand.New(rand.NewPCG(uint64(round), 0x7475726e)) // "turn"
		r.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	return order
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
