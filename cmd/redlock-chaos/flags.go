package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redlock/redlock/internal/unsafelocker"
)

// config is what the flags say.
type config struct {
	seed       uint64
	safe       bool
	clients    int
	lockers    int
	keys       int
	nodes      int
	ttl        time.Duration
	hold       time.Duration
	duration   time.Duration
	faults     []string
	faultEvery time.Duration
	server     string
	svg        string
	history    string
	json       bool
	models     bool
	resource   string // -resource: both, redis or sql
	mixed      bool   // -mixed: multi-key leases and Do beside Lock
	sim        simSettings
	simRun     *simConfig // -sim: the simulation's run (nil: a run on real servers)
}

// simSettings are a simulated schedule's: its transport, whether go-redis
// retries, and what a control leaves out of the safe configuration.
type simSettings struct {
	variant      string // the simulated configuration's name (simVariants); "" on real servers
	direct       bool   // Options.NoAutoPipeline
	retries      bool   // go-redis MaxRetries 2 on the lock clients
	noFencing    bool   // a control: the guard on, fencing off
	noQuarantine bool   // a control: fencing on, the guard's quarantines off
	hooks        unsafelocker.Hooks
}

// usageError is a bad flag: exit status 2.
type usageError struct{ error }

// faultKinds are the nemesis's faults, in the order the manual lists them.
var faultKinds = []string{"freeze", "kill", "outage", "amnesia", "snapshot", "rollback", "partition", "blackhole", "latency", "scriptflush", "flush", "evict", "pressure", "clockjump", "failover", "pause"}

// simFaultKinds are the simulation's: the nemesis's, and three it alone
// can stage (simulation.go).
var simFaultKinds = append(slices.Clone(faultKinds), "clockrate", "lostreply", "stall")

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("redlock-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 0, "the nemesis's seed (0: one from the clock, printed)")
	conf := fs.String("config", "safe", "safe (fencing, the node guard) or unsafe (neither: the negative control)")
	fs.IntVar(&cfg.clients, "clients", 6, "clients")
	fs.IntVar(&cfg.lockers, "lockers", 2, "Lockers the clients are spread over")
	fs.IntVar(&cfg.keys, "keys", 2, "lock names, each guarding one counter")
	fs.IntVar(&cfg.nodes, "nodes", 5, "lock nodes")
	fs.DurationVar(&cfg.ttl, "ttl", time.Second, "lease TTL")
	var hold defaultedDuration
	fs.Var(&hold, "hold", "the `duration` between a critical section's read and its write (default: a quarter of -ttl)")
	fs.DurationVar(&cfg.duration, "duration", 30*time.Second, "how long the clients run")
	faults := fs.String("faults", strings.Join(faultKinds, ","), "faults to inject, comma-separated: "+strings.Join(faultKinds, ", "))
	fs.DurationVar(&cfg.faultEvery, "fault-every", 2*time.Second, "mean time between faults")
	fs.StringVar(&cfg.server, "server", "", "the server to start (default: redis-server on PATH)")
	fs.StringVar(&cfg.svg, "svg", "", "write the run's timeline to this SVG file")
	fs.StringVar(&cfg.history, "history", "", "where porcupine's visualisation of a non-linearizable history goes (default: redlock-chaos-SEED.html in the temporary directory)")
	fs.BoolVar(&cfg.json, "json", false, "print the results as JSON")
	fs.StringVar(&cfg.resource, "resource", "both", "where the counters live: redis (fence.Redis), sql (a SQLite table, fence.SQL), or both (even keys on Redis, odd keys in SQL)")
	fs.BoolVar(&cfg.mixed, "mixed", false, "clients also take two keys at once (LockMulti) and run their work under Do for longer than the TTL (its extensions keep the lease), each in one cycle of four")
	fs.BoolVar(&cfg.models, "models", false, "run each kind of fault in -faults alone, unsafe then safe, and print a table of the trials")
	sim := fs.Bool("sim", false, "simulate instead: the Locker against simulated nodes in virtual time, -seeds schedules from -seed (see the manual)")
	seeds := fs.Int("seeds", 300, "with -sim: schedules in the safe configuration")
	replays := fs.Int("replays", 0, "with -sim: run the schedule of -seed this many times and count its verdicts")
	controls := fs.Bool("controls", true, "with -sim: run the negative controls too")
	artefacts := fs.String("artifacts", "", "with -sim: where failing schedules' and controls' timelines (SVG) and reports go (default: a directory in the temporary directory)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, usageError{errors.New("see go doc ./cmd/redlock-chaos")}
		}
		return cfg, usageError{err}
	}
	if *conf != "safe" && cfg.models {
		return cfg, usageError{errors.New("-models runs both configurations: leave -config out")}
	}
	if *sim {
		if *seeds < 1 || *replays < 0 {
			return cfg, usageError{fmt.Errorf("-seeds %d, -replays %d: want at least one schedule, and no negative replays", *seeds, *replays)}
		}
		cfg.simRun = &simConfig{seeds: *seeds, controls: *controls, replays: *replays, artefacts: *artefacts}
	}
	if fs.NArg() > 0 {
		return cfg, usageError{fmt.Errorf("unexpected arguments: %q", fs.Args())}
	}
	if cfg.resource != "both" && cfg.resource != "redis" && cfg.resource != "sql" {
		return cfg, usageError{fmt.Errorf("-resource %q: want both, redis or sql", cfg.resource)}
	}
	switch *conf {
	case "safe":
		cfg.safe = true
	case "unsafe":
	default:
		return cfg, usageError{fmt.Errorf("-config %q: want safe or unsafe", *conf)}
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"-clients", cfg.clients}, {"-lockers", cfg.lockers}, {"-keys", cfg.keys}, {"-nodes", cfg.nodes}} {
		if c.v < 1 {
			return cfg, usageError{fmt.Errorf("%s %d: want at least 1", c.name, c.v)}
		}
	}
	if cfg.lockers > cfg.clients {
		return cfg, usageError{fmt.Errorf("-lockers %d: more Lockers than -clients %d", cfg.lockers, cfg.clients)}
	}
	if cfg.ttl < 100*time.Millisecond {
		return cfg, usageError{fmt.Errorf("-ttl %v: want at least 100ms", cfg.ttl)}
	}
	cfg.hold = hold.or(cfg.ttl / 4)
	if cfg.hold < 0 {
		return cfg, usageError{fmt.Errorf("-hold %v: must not be negative", cfg.hold)}
	}
	if cfg.hold >= cfg.ttl/2 {
		return cfg, usageError{fmt.Errorf("-hold %v: want less than half the TTL (%v), or leases run out in the normal case", cfg.hold, cfg.ttl)}
	}
	if cfg.duration <= 0 || cfg.faultEvery <= 0 {
		return cfg, usageError{errors.New("-duration and -fault-every must be positive")}
	}
	for _, f := range strings.Split(*faults, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "" || f == "none":
		case slices.Contains(faultKinds, f):
			if !slices.Contains(cfg.faults, f) {
				cfg.faults = append(cfg.faults, f)
			}
		default:
			return cfg, usageError{fmt.Errorf("-faults: unknown fault %q (known: %s)", f, strings.Join(faultKinds, ", "))}
		}
	}
	cfg.seed = *seed
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	if cfg.simRun != nil {
		cfg.simRun.first = cfg.seed
		if cfg.simRun.artefacts == "" {
			cfg.simRun.artefacts = filepath.Join(os.TempDir(), fmt.Sprintf("redlock-sim-%d", cfg.seed))
		}
	}
	if cfg.history == "" {
		cfg.history = filepath.Join(os.TempDir(), fmt.Sprintf("redlock-chaos-%d.html", cfg.seed))
	}
	return cfg, nil
}

// defaultedDuration is a duration flag whose default depends on other
// flags, so is known only after parsing: unset, it shows no default of its
// own in -h (the usage text says what it is), where a sentinel such as -1
// would print "(default -1ns)".
type defaultedDuration struct {
	d   time.Duration
	set bool
}

func (f *defaultedDuration) String() string {
	if f == nil || !f.set {
		return ""
	}
	return f.d.String()
}

func (f *defaultedDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	f.d, f.set = d, true
	return nil
}

// or is the flag's value, or def where it was not set.
func (f *defaultedDuration) or(def time.Duration) time.Duration {
	if !f.set {
		return def
	}
	return f.d
}
