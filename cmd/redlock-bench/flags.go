package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

type config struct {
	nodes        []string        // -nodes: addresses or redis:// URLs
	trustNodes   bool            // -trust-nodes: TrustNodes on -nodes (always on nodes this run starts)
	spawn        int             // -spawn: local redis-server processes
	embedded     int             // -embedded: in-process nodes (the default source)
	clients      int             // -clients
	lockers      int             // -lockers
	keys         int             // -keys
	ttl          time.Duration   // -ttl
	hold         time.Duration   // -hold
	duration     time.Duration   // -duration
	ops          int             // -ops: total cycles per implementation (0: use duration)
	fencing      bool            // -fencing
	mode         string          // -mode
	nodeTimeout  time.Duration   // -node-timeout
	latency      []time.Duration // -node-latency
	faults       []fault         // -fault
	impls        []string        // -impl
	jsonOut      bool            // -json
	plot         string          // -plot
	quiet        bool            // -q
	cpuprofile   string          // -cpuprofile
	goredisPipe  bool            // -goredis-autopipeline
	noPipeline   bool            // -no-autopipeline
	rounds       int             // -rounds
	server       string          // -server: the redis-server (or valkey-server) that -spawn starts
	keyPrefix    string          // -key-prefix
	tlsCA        string          // -tls-ca
	tlsCert      string          // -tls-cert
	tlsKey       string          // -tls-key
	replicas     int             // -replicas: replicas per spawned node
	waitReps     int             // -wait-replicas: Options.WaitReplicas
	waitAOF      bool            // -wait-aof: Options.WaitAOF
	replicate    bool            // set for redlock-wait: apply waitReps and waitAOF
	noQuarantine bool            // set for redlock-unguarded: Options.NoQuarantine
	noWakeUps    bool            // set for redlock-nowake: Options.NoWakeUps
	pair         string          // set for redlock-pair ("multi") and redlock-pair-seq ("sequential"): each cycle locks two keys
	observer     string          // set for the observed variants (observe.go): which Observer
	etcdMembers  int             // -etcd: members of the cluster -impl etcd starts
	etcdTimeout  time.Duration   // -etcd-timeout: the bound on each etcd attempt
	tour         bool            // -tour (and no arguments at all): the default suite of scenarios (tour.go)
}

// fault is one scheduled fault: freeze node k at `at` for `dur` (0: to the
// end), stop it, or freeze its replicas (freeze-replica: the node answers,
// but its WAITs run to their timeout). For -impl etcd the target may be a
// role instead, the member that is the leader (or a follower) when the
// fault begins.
type fault struct {
	kind string // "freeze", "stop" or "freeze-replica"
	node int    // -1 when role is set
	role string // "leader", "follower" or ""
	at   time.Duration
	dur  time.Duration
}

// onProxy reports whether the fault is carried out by a node's proxy
// (freeze-replica signals the replica processes instead).
func (f fault) onProxy() bool { return f.kind != "freeze-replica" }

// begins waits until the fault's time in the run; false if ctx ended first.
func (f fault) begins(ctx context.Context) bool {
	select {
	case <-time.After(f.at):
		return true
	case <-ctx.Done():
		return false
	}
}

// lasts waits out the fault's length (to the run's end, if it has none).
func (f fault) lasts(ctx context.Context) {
	if f.dur == 0 {
		<-ctx.Done()
		return
	}
	select {
	case <-time.After(f.dur):
	case <-ctx.Done():
	}
}

func (f fault) String() string {
	target := f.role
	if target == "" {
		target = strconv.Itoa(f.node)
	}
	s := fmt.Sprintf("%s:%s@%v", f.kind, target, f.at)
	if f.dur > 0 {
		s += "+" + f.dur.String()
	}
	return s
}

// allImpls is what -impl all runs; knownImpls adds the library's other
// transport, for comparing the two.
var (
	allImpls   = []string{"redlock", "raw", "redsync", "redsync-failfast"}
	knownImpls = append([]string{"redlock-nowake", "redlock-fenced", "redlock-direct", "redlock-wait", "redlock-unguarded", "redlock-events", "redlock-slog", "redlock-slog-info", "redlock-otel", "redlock-otel-1pct", "redlock-pair", "redlock-pair-seq", "etcd"}, allImpls...)
)

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	var nodes, latency, faults, impl string
	fs := flag.NewFlagSet("redlock-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&nodes, "nodes", "", "comma-separated `host:port` or redis:// / rediss:// URLs of the nodes to benchmark")
	fs.BoolVar(&c.trustNodes, "trust-nodes", false, "call Locker.TrustNodes on the -nodes first: only for nodes known to hold no locks (nodes this run starts are always trusted: they are new)")
	fs.IntVar(&c.spawn, "spawn", 0, "start `N` local redis-server processes on free 127.0.0.1 ports")
	fs.StringVar(&c.server, "server", "", "with -spawn: the server `binary` to start (default redis-server on PATH; e.g. a valkey-server, or a wrapper from scripts/fetch-redis-server.sh)")
	fs.IntVar(&c.replicas, "replicas", 0, "with -spawn: start `R` replicas of each node")
	fs.IntVar(&c.waitReps, "wait-replicas", 1, "redlock-wait: count a node's grant once `K` replicas acknowledged it (Options.WaitReplicas)")
	fs.BoolVar(&c.waitAOF, "wait-aof", false, "redlock-wait: WAITAOF instead of WAIT: the node's and its replicas' fsyncs (Options.WaitAOF)")
	fs.StringVar(&c.keyPrefix, "key-prefix", "redlock-bench:", "lock names start with this `prefix` (match it to an ACL user's key patterns)")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "rediss:// nodes: trust the CA certificates in this PEM `file` (default: the system's)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "rediss:// nodes: present this client certificate (PEM `file`; with -tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "rediss:// nodes: the client certificate's private key (PEM `file`)")
	fs.IntVar(&c.embedded, "embedded", 5, "in-process Redis nodes to start when neither -nodes nor -spawn is given")
	fs.IntVar(&c.clients, "clients", 4, "concurrent clients")
	fs.IntVar(&c.lockers, "lockers", 1, "this library: spread the clients over `N` Lockers, each with connections of its own, as N processes would be")
	fs.IntVar(&c.keys, "keys", 1, "distinct lock names; 1 makes every client contend for one key")
	fs.DurationVar(&c.ttl, "ttl", 10*time.Second, "lock TTL")
	fs.DurationVar(&c.hold, "hold", 0, "time inside the critical section")
	fs.DurationVar(&c.duration, "duration", 2*time.Second, "how long to run each implementation")
	fs.IntVar(&c.rounds, "rounds", 1, "run the implementations in turn this many times, each for a share of -duration (or -ops), and merge the shares: interleaving puts them under the same noise on a shared machine (turns of about 100 ms cancel it best); rounds after the first run in shuffled orders (the same in every run)")
	fs.IntVar(&c.ops, "ops", 0, "run this many cycles per implementation instead of -duration")
	fs.BoolVar(&c.fencing, "fencing", false, "issue fencing tokens (redlock only)")
	fs.BoolVar(&c.noPipeline, "no-autopipeline", false, "redlock: a pooled connection per command (Options.NoAutoPipeline) instead of one auto-pipeline per node")
	fs.BoolVar(&c.goredisPipe, "goredis-autopipeline", false, "redlock: go-redis AutoPipeline clients (experimental in go-redis) instead of its own auto-pipeline")
	fs.StringVar(&c.mode, "mode", "trylock", "trylock (one attempt per cycle), lock (wait for the lock) or do (Locker.Do)")
	fs.DurationVar(&c.nodeTimeout, "node-timeout", 0, "redlock's per-node timeout (0: the library default, 50ms)")
	fs.StringVar(&latency, "node-latency", "", "comma-separated one-way `delays`, one per node, through a delay proxy (e.g. 1ms,2ms,3ms,4ms,50ms)")
	fs.StringVar(&faults, "fault", "", "faults to inject: `freeze:K@T[+D]`, stop:K@T or freeze-replica:K@T[+D], comma-separated (node K, at T, for D; freeze-replica freezes node K's -replicas, so that its WAITs run to their timeout; with -impl etcd alone K may be leader or follower)")
	fs.StringVar(&impl, "impl", "all", "implementations: redlock, redlock-nowake, redlock-fenced, redlock-direct, redlock-wait, redlock-unguarded, redlock-events, redlock-slog, redlock-slog-info, redlock-otel, redlock-otel-1pct, redlock-pair, redlock-pair-seq, raw, redsync, redsync-failfast, etcd, or all (comma-separated; all is the first four); etcd needs a build with -tags etcd, redlock-otel and redlock-otel-1pct one with -tags otel (go run -tags etcd,otel ./cmd/redlock-bench)")
	fs.IntVar(&c.etcdMembers, "etcd", 3, "-impl etcd (built with -tags etcd): start an etcd cluster of `N` members (child processes on loopback)")
	fs.DurationVar(&c.etcdTimeout, "etcd-timeout", time.Second, "-impl etcd: the deadline of each attempt, release and session grant")
	fs.BoolVar(&c.jsonOut, "json", false, "print results as JSON")
	fs.StringVar(&c.plot, "plot", "", "write a latency CDF per implementation to this SVG `file`")
	fs.BoolVar(&c.quiet, "q", false, "no progress line")
	fs.BoolVar(&c.tour, "tour", false, "run the default suite (what no flags at all run): zones, a frozen node, load and contention, each side by side with the floor and redsync, with what it shows")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the runs to this `file` (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.tour {
		var others []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "tour" && f.Name != "q" {
				others = append(others, "-"+f.Name)
			}
		})
		if len(others) > 0 {
			return config{}, fmt.Errorf("%w (got %s): its scenarios set their own", errTourFlags, strings.Join(others, " "))
		}
	}
	var err error
	if nodes != "" {
		c.nodes = strings.Split(nodes, ",")
	}
	if c.latency, err = parseDurations(latency); err != nil {
		return config{}, fmt.Errorf("-node-latency: %w", err)
	}
	if c.faults, err = parseFaults(faults); err != nil {
		return config{}, fmt.Errorf("-fault: %w", err)
	}
	if c.impls, err = parseImpls(impl); err != nil {
		return config{}, fmt.Errorf("-impl: %w", err)
	}
	if err := c.validate(); err != nil {
		return config{}, err
	}
	return c, checkBuilt(c.impls, args) // after validate: a flag's error is said in every build
}

func (c *config) nodeCount() int {
	switch {
	case len(c.nodes) > 0:
		return len(c.nodes)
	case c.spawn > 0:
		return c.spawn
	}
	return c.embedded
}

func (c *config) validate() error {
	switch {
	case len(c.nodes) > 0 && c.spawn > 0:
		return errors.New("-nodes and -spawn: give one of them")
	case c.spawn < 0 || c.spawn > 99:
		return fmt.Errorf("-spawn %d: need 1 to 99", c.spawn)
	case c.embedded < 1 || c.embedded > 99:
		return fmt.Errorf("-embedded %d: need 1 to 99", c.embedded)
	case c.clients < 1 || c.clients > 10000:
		return fmt.Errorf("-clients %d: need 1 to 10000", c.clients)
	case c.lockers < 1 || c.lockers > c.clients:
		return fmt.Errorf("-lockers %d: need 1 to -clients (%d)", c.lockers, c.clients)
	case c.keys < 1:
		return fmt.Errorf("-keys %d: need at least 1", c.keys)
	case c.ttl < 3*time.Millisecond:
		return fmt.Errorf("-ttl %v: must be at least 3ms", c.ttl)
	case c.hold < 0:
		return fmt.Errorf("-hold %v: must not be negative", c.hold)
	case c.hold >= c.ttl:
		return fmt.Errorf("-hold %v: must be shorter than -ttl %v", c.hold, c.ttl)
	case c.duration <= 0:
		return fmt.Errorf("-duration %v: must be positive", c.duration)
	case c.ops < 0:
		return fmt.Errorf("-ops %d: must not be negative", c.ops)
	case c.rounds < 1 || c.rounds > 1000:
		return fmt.Errorf("-rounds %d: need 1 to 1000", c.rounds)
	case c.ops > 0 && c.ops < c.rounds:
		return fmt.Errorf("-ops %d: fewer cycles than -rounds %d", c.ops, c.rounds)
	case c.ops == 0 && c.duration/time.Duration(c.rounds) < 10*time.Millisecond:
		return fmt.Errorf("-duration %v: under 10ms per round with -rounds %d", c.duration, c.rounds)
	case c.rounds > 1 && len(c.faults) > 0:
		return fmt.Errorf("-rounds %d with -fault: a fault schedule needs one continuous run per implementation", c.rounds)
	case c.nodeTimeout < 0:
		return fmt.Errorf("-node-timeout %v: must not be negative", c.nodeTimeout)
	case c.mode != "trylock" && c.mode != "lock" && c.mode != "do":
		return fmt.Errorf("-mode %q: want trylock, lock or do", c.mode)
	case c.replicas < 0 || c.replicas > 5:
		return fmt.Errorf("-replicas %d: need 0 to 5", c.replicas)
	case c.replicas > 0 && c.spawn == 0:
		return fmt.Errorf("-replicas %d: only with -spawn", c.replicas)
	case c.waitReps < 0:
		return fmt.Errorf("-wait-replicas %d: must not be negative", c.waitReps)
	case c.server != "" && c.spawn == 0:
		return fmt.Errorf("-server %s: only with -spawn", c.server)
	case (c.tlsCA != "" || c.tlsCert != "" || c.tlsKey != "") && len(c.nodes) == 0:
		return errors.New("-tls-ca, -tls-cert and -tls-key: only with -nodes (rediss:// URLs)")
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return errors.New("-tls-cert and -tls-key: give both or neither")
	}
	for i, n := range c.nodes {
		if strings.TrimSpace(n) == "" {
			return fmt.Errorf("-nodes: entry %d is empty", i+1)
		}
	}
	n := c.nodeCount()
	if len(c.latency) > 0 && len(c.latency) != n {
		return fmt.Errorf("-node-latency: %d delays for %d nodes", len(c.latency), n)
	}
	etcd, onlyEtcd := false, true
	for _, im := range c.impls {
		etcd = etcd || im == "etcd"
		onlyEtcd = onlyEtcd && im == "etcd"
	}
	switch {
	case etcd && (c.etcdMembers < 1 || c.etcdMembers > 9):
		return fmt.Errorf("-etcd %d: need 1 to 9 members", c.etcdMembers)
	case etcd && c.etcdTimeout <= 0:
		return fmt.Errorf("-etcd-timeout %v: must be positive", c.etcdTimeout)
	case etcd && c.mode == "do":
		return errors.New("-mode do: Locker.Do is this library's; -impl etcd runs trylock or lock")
	}
	for _, f := range c.faults {
		switch {
		case f.kind == "freeze-replica" && (c.spawn == 0 || c.replicas == 0):
			return fmt.Errorf("-fault %s: needs -spawn and -replicas (it freezes the replicas this run starts)", f)
		case f.kind == "freeze-replica" && etcd:
			return fmt.Errorf("-fault %s: etcd members have no replicas; run it without -impl etcd", f)
		case f.role != "" && !onlyEtcd:
			return fmt.Errorf("-fault %s: a member's role is etcd's; run -impl etcd alone, or name a node", f)
		case f.role == "" && !onlyEtcd && f.node >= n:
			return fmt.Errorf("-fault %s:%d: there are only %d nodes (numbered from 0)", f.kind, f.node, n)
		case f.role == "" && etcd && f.node >= c.etcdMembers:
			return fmt.Errorf("-fault %s:%d: there are only %d etcd members (numbered from 0)", f.kind, f.node, c.etcdMembers)
		}
	}
	return nil
}

func parseDurations(s string) ([]time.Duration, error) {
	if s == "" {
		return nil, nil
	}
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, fmt.Errorf("%v is negative", d)
		}
		out = append(out, d)
	}
	return out, nil
}

// parseFaults parses "freeze:2@1s+2s,stop:4@3s,freeze-replica:0@0s".
func parseFaults(s string) ([]fault, error) {
	if s == "" {
		return nil, nil
	}
	var out []fault
	for _, part := range strings.Split(s, ",") {
		kind, rest, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok || (kind != "freeze" && kind != "stop" && kind != "freeze-replica") {
			return nil, fmt.Errorf("%q: want freeze:K@T[+D], stop:K@T or freeze-replica:K@T[+D]", part)
		}
		node, when, ok := strings.Cut(rest, "@")
		if !ok {
			return nil, fmt.Errorf("%q: missing @T", part)
		}
		f := fault{kind: kind, node: -1}
		if node == "leader" || node == "follower" {
			f.role = node
		} else {
			k, err := strconv.Atoi(node)
			if err != nil || k < 0 {
				return nil, fmt.Errorf("%q: node %q is not a node number (or, for -impl etcd, leader or follower)", part, node)
			}
			f.node = k
		}
		at, span, hasSpan := strings.Cut(when, "+")
		var err error
		if f.at, err = time.ParseDuration(at); err != nil || f.at < 0 {
			return nil, fmt.Errorf("%q: bad time %q", part, at)
		}
		if hasSpan {
			if f.dur, err = time.ParseDuration(span); err != nil || f.dur <= 0 {
				return nil, fmt.Errorf("%q: bad duration %q", part, span)
			}
		}
		out = append(out, f)
	}
	return out, nil
}

func parseImpls(s string) ([]string, error) {
	if s == "all" {
		return allImpls, nil
	}
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, known := range knownImpls {
			found = found || name == known
		}
		if !found {
			return nil, fmt.Errorf("unknown implementation %q (want %s or all)", name, strings.Join(knownImpls, ", "))
		}
		out = append(out, name)
	}
	return out, nil
}
