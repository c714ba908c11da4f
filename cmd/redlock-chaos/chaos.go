package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/fence"
	"github.com/redlock/redlock/redlock"
)

// result is a run's record and the referee's judgement of it.
type result struct {
	Seed     uint64        `json:"seed"`
	Config   string        `json:"config"`
	Server   string        `json:"server"`
	Duration time.Duration `json:"duration"` // the clients' run, to the last release
	Faults   []fault       `json:"faults"`   // planned and carried out
	Leases   []leaseRecord `json:"leases"`
	Accesses []access      `json:"accesses"`
	Errors   map[string]int
	Counts   counts `json:"counts"`
	// Trials are the faults of each kind, and how many were followed by
	// each kind of violation.
	Trials []trials `json:"trials"`
	// Linearizable is porcupine's verdict on the increments: Ok, Illegal
	// or Unknown (it ran out of time); HistoryFile its visualisation,
	// written when Illegal.
	Linearizable string `json:"linearizable"`
	HistoryFile  string `json:"history_file,omitempty"`
}

// chaos starts the servers, runs the clients and the nemesis, heals, and
// judges.
func chaos(ctx context.Context, cfg config, progress io.Writer) (*result, error) {
	d, err := startDeployment(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer d.close()
	rc := redis.NewClient(&redis.Options{Addr: d.resource.Addr(), MaxRetries: -1})
	defer rc.Close()
	store := &resources{kind: cfg.resource, redis: &redisResource{client: rc}}
	if cfg.safe {
		store.redis.guard = fence.NewRedis(rc)
	}
	if cfg.resource != "redis" {
		dir, err := os.MkdirTemp("", "redlock-chaos-sql-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if store.sql, err = openSQL(ctx, dir, cfg.keys, cfg.safe); err != nil {
			return nil, fmt.Errorf("the SQL resource: %w", err)
		}
		defer store.sql.db.Close()
	}

	opts := &redlock.Options{MaxTTL: cfg.ttl, NodeTimeout: 100 * time.Millisecond}
	if cfg.safe {
		opts.Fencing = true
	} else {
		opts.NoQuarantine = true
	}
	lockers := make([]*redlock.Locker, cfg.lockers)
	for i := range lockers {
		var nodes []redlock.Node
		for _, c := range d.lockClients() {
			defer c.Close()
			nodes = append(nodes, c)
		}
		if lockers[i], err = redlock.New(nodes, opts); err != nil {
			return nil, err
		}
		// The servers are new and hold no locks.
		if err := lockers[i].TrustNodes(ctx); err != nil {
			return nil, fmt.Errorf("TrustNodes: %w", err)
		}
	}

	faults := plan(cfg)
	fmt.Fprintf(progress, "redlock-chaos: seed %d, %s configuration, %d nodes (%s), %d clients on %d Lockers, %d keys, TTL %v, %v, %d faults planned; counters on %s\n",
		cfg.seed, configName(cfg), cfg.nodes, d.version, cfg.clients, cfg.lockers, cfg.keys, cfg.ttl, cfg.duration, len(faults), store.describe())
	hist, ran, err := exercise(ctx, cfg, lockers, store, d, faults)
	if err != nil {
		return nil, err
	}
	res := judge(cfg, d.version, faults, hist, ran)
	fmt.Fprintf(progress, "redlock-chaos: %d leases, %d accesses in %v; judging\n", len(res.Leases), len(res.Accesses), ran.Round(time.Millisecond))

	// Every key a lease set expires within a TTL of its last write: wait
	// that out (twice, for the servers' own expiry cycles), then look.
	time.Sleep(2 * cfg.ttl)
	if res.Counts.KeysLeft, err = keysLeft(ctx, d.admins, cfg); err != nil {
		return nil, err
	}
	final, err := finalCounters(ctx, store, cfg)
	if err != nil {
		return nil, err
	}
	if err := res.conclude(cfg, hist, final); err != nil {
		return nil, err
	}
	return res, nil
}

// exercise runs the clients on the Lockers, and the nemesis's faults on the
// nodes, for cfg.duration; waits until every fault has healed; and drains
// the Lockers. It returns what the clients did and how long they ran.
func exercise(ctx context.Context, cfg config, lockers []*redlock.Locker, store *resources, nodes target, faults []fault) (*history, time.Duration, error) {
	start := time.Now()
	hist := &history{errors: map[string]int{}}
	nem := newNemesis(nodes, cfg, start)
	runCtx, stopClients := context.WithTimeout(ctx, cfg.duration)
	defer stopClients()
	var wg sync.WaitGroup
	for i := range cfg.clients {
		c := &client{id: i, locker: lockers[i%cfg.lockers], res: store, cfg: cfg, start: start,
			hist: hist, pauses: nem.pauses[i], rng: rand.New(rand.NewPCG(cfg.seed, uint64(i)))}
		wg.Go(func() { c.run(runCtx) })
	}
	nemDone := make(chan struct{})
	go func() { nem.run(runCtx, faults); close(nemDone) }()
	wg.Wait()
	<-nemDone // every fault healed
	ran := time.Since(start)
	for _, l := range lockers {
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := l.Drain(dctx)
		cancel()
		if err != nil {
			return nil, 0, fmt.Errorf("Drain: %w", err)
		}
	}
	return hist, ran, ctx.Err()
}

// judge is the referee's verdict on what the clients did, with all of it
// recorded in the result; what needs the servers after the run (the keys
// left, the counters, porcupine's verdict) is conclude's.
func judge(cfg config, server string, faults []fault, hist *history, ran time.Duration) *result {
	res := &result{Seed: cfg.seed, Config: configName(cfg), Server: server, Duration: ran,
		Faults: faults, Leases: hist.leases, Accesses: hist.accesses, Errors: hist.errors}
	res.Counts = referee(cfg, hist)
	res.Counts.PastBound, res.Counts.BoundedCalls = hist.pastBound, hist.calls
	return res
}

// conclude adds the verdicts that take the final counters: increments
// lost, each fault's trials, and porcupine's.
func (res *result) conclude(cfg config, hist *history, final []int64) error {
	res.Counts.lostIncrements(hist, final)
	res.Trials = attribute(res.Faults, res.Counts.Marks, cfg.ttl)
	var err error
	res.Linearizable, res.HistoryFile, err = checkLinearizable(cfg, hist)
	return err
}

func configName(cfg config) string {
	if cfg.safe {
		return "safe"
	}
	return "unsafe"
}

// keysLeft counts the lock keys still on any node.
func keysLeft(ctx context.Context, admins []*redis.Client, cfg config) (int, error) {
	n := 0
	for i, admin := range admins {
		for k := range cfg.keys {
			found, err := admin.Exists(ctx, lockName(k)).Result()
			if err != nil {
				return 0, fmt.Errorf("node %d after the run: %w", i, err)
			}
			n += int(found)
		}
	}
	return n, nil
}

// finalCounters reads every counter from its resource.
func finalCounters(ctx context.Context, res *resources, cfg config) ([]int64, error) {
	out := make([]int64, cfg.keys)
	for k := range out {
		v, err := res.of(k).final(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("the resource of key %d after the run: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}
