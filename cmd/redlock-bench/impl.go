package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/redlock/redlock/internal/luascript"
	"github.com/redlock/redlock/redlock"
)

// outcome of one acquisition attempt.
type outcome int

const (
	acquired  outcome = iota
	contended         // someone else holds the lock
	failed            // an error other than contention
)

// cycler runs one lock cycle: acquire key, hold, release. It reports how long
// the acquisition and the release took, and what became of the attempt.
type cycler func(ctx context.Context, key string) (acquire, release time.Duration, o outcome, err error)

// impl is one implementation under test.
type impl struct {
	name  string
	about string
	cycle cycler
	// cycleFor, where set, is client c's cycle (its own Locker, with
	// -lockers); cycle is then client 0's.
	cycleFor func(client int) cycler
	drain    func() // waits for background work, between implementations
	// settle finishes the work of a turn that is the implementation's own
	// but runs after its operations returned (an Observer's queued
	// recording), inside the turn's time: each implementation pays for its
	// own, where the next turn would otherwise pay for it. nil: none.
	settle func()
	// warning is said before the run: here, the nodes Locker.Warm could not
	// ready (the run goes on; their calls fail or dial on first use).
	warning string
	// health is the Locker's Health, for this library's implementations
	// (nil for the others).
	health func() []redlock.NodeHealth
	// events is the event counts so far, by Op, for the observed
	// implementations (nil for the others).
	events func() map[string]int64
	// inject carries out -fault on this implementation's own servers (nil:
	// on the Redis nodes' proxies), reporting what it did.
	inject func(ctx context.Context, faults []fault, report func(string))
}

func newImpl(ctx context.Context, name string, d *deployment, cfg config) (*impl, error) {
	switch name {
	case "redlock", "redlock-nowake", "redlock-fenced", "redlock-direct", "redlock-wait", "redlock-unguarded", "redlock-events", "redlock-slog", "redlock-slog-info", "redlock-otel", "redlock-otel-1pct", "redlock-pair", "redlock-pair-seq":
		switch name {
		case "redlock-events", "redlock-slog", "redlock-slog-info", "redlock-otel", "redlock-otel-1pct": // this library with an Observer (observe.go)
			cfg.observer = name
		case "redlock-unguarded": // this library with the node guard's refusals off (Options.NoQuarantine)
			cfg.noQuarantine = true
		case "redlock-nowake": // this library with release notices off (Options.NoWakeUps)
			cfg.noWakeUps = true
		case "redlock-fenced": // this library with fencing tokens (Options.Fencing), beside plain redlock
			cfg.fencing = true
		case "redlock-direct": // this library over its other transport, for comparison
			cfg.noPipeline, cfg.goredisPipe = true, false
		case "redlock-wait": // this library with Options.WaitReplicas (-wait-replicas, -wait-aof)
			cfg.replicate = true
		case "redlock-pair": // two keys a cycle, in one multi-key lease (TryLockMulti)
			cfg.pair = "multi"
		case "redlock-pair-seq": // two keys a cycle, one lock after the other
			cfg.pair = "sequential"
		}
		im, err := newRedlock(ctx, d, cfg)
		if im != nil {
			im.name = name
		}
		return im, err
	case "raw":
		return newRaw(ctx, d, cfg), nil
	case "redsync":
		return newRedsync(ctx, d, cfg, false), nil
	case "redsync-failfast":
		return newRedsync(ctx, d, cfg, true), nil
	}
	if newTagged, ok := taggedImpls[name]; ok { // etcd (etcd.go)
		return newTagged(ctx, d, cfg)
	}
	if err := checkBuilt([]string{name}, nil); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("unknown implementation %q", name)
}

func hold(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func newRedlock(ctx context.Context, d *deployment, cfg config) (*impl, error) {
	var nodes []redlock.Node
	minIdle := 0
	if cfg.noPipeline {
		minIdle = cfg.clients // a connection per caller; Warm opens them
	}
	for _, c := range d.newClients(ctx, minIdle) {
		if cfg.goredisPipe {
			ap, err := c.AutoPipeline() // go-redis's own batching, one ordered stream per node
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, ap)
			continue
		}
		nodes = append(nodes, c)
	}
	o := &redlock.Options{Fencing: cfg.fencing, NodeTimeout: cfg.nodeTimeout, NoAutoPipeline: cfg.noPipeline, MaxTTL: max(redlock.DefaultMaxTTL, cfg.ttl), NoQuarantine: cfg.noQuarantine}
	if cfg.replicate {
		o.WaitReplicas, o.WaitAOF = cfg.waitReps, cfg.waitAOF
	}
	var counter *eventCounter
	if cfg.observer != "" {
		var err error
		if counter, err = observerFor(cfg.observer); err != nil {
			return nil, err
		}
		o.Observer = counter.observer()
	}
	if cfg.noWakeUps {
		o.NoWakeUps = true
	}
	l, err := redlock.New(nodes, o)
	if err != nil {
		return nil, err
	}
	// -lockers: more Lockers, each with connections of its own, as other
	// processes would have; client c uses lockers[c % N].
	lockers := []*redlock.Locker{l}
	for len(lockers) < cfg.lockers {
		var more []redlock.Node
		for _, c := range d.newClients(ctx, minIdle) {
			more = append(more, c)
		}
		other, err := redlock.New(more, o)
		if err != nil {
			return nil, err
		}
		lockers = append(lockers, other)
	}
	classify := func(err error) outcome {
		switch {
		case err == nil:
			return acquired
		case errors.Is(err, redlock.ErrNotObtained):
			return contended
		}
		return failed
	}
	im := &impl{name: "redlock", drain: func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, l := range lockers {
			_ = l.Drain(ctx)
		}
	}}
	transport := "auto-pipeline per node"
	switch {
	case cfg.goredisPipe:
		transport = "go-redis AutoPipeline clients"
	case cfg.noPipeline:
		transport = "a pooled connection per command (NoAutoPipeline)"
	}
	im.about = fmt.Sprintf("this library, mode %s, fencing %v, %s", cfg.mode, cfg.fencing, transport)
	if cfg.noQuarantine {
		im.about += ", node guard off (NoQuarantine)"
	}
	if cfg.noWakeUps {
		im.about += ", wake-ups off (NoWakeUps: waiters in other Lockers poll)"
	}
	switch cfg.pair {
	case "multi":
		im.about += ", two keys a cycle (the key and KEY:pair) in one multi-key lease (TryLockMulti)"
	case "sequential":
		im.about += ", two keys a cycle (the key and KEY:pair), one TryLock after the other"
	}
	if len(lockers) > 1 {
		im.about += fmt.Sprintf(", %d Lockers (clients spread over them, as processes)", len(lockers))
	}
	if counter != nil {
		im.about += ", " + observedImpls[cfg.observer]
		im.events, im.settle = counter.snapshot, counter.flush
	}
	switch {
	case !cfg.replicate:
	case cfg.waitAOF:
		im.about += fmt.Sprintf(", WAITAOF 1 %d", cfg.waitReps)
	case cfg.waitReps > 0:
		im.about += fmt.Sprintf(", WAIT %d", cfg.waitReps)
	}
	// Warm, as the README tells users to: the first cycles then measure the
	// lock, not the handshakes and the scripts' first load.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, l := range lockers {
		if err := l.Warm(wctx); err != nil {
			im.warning = err.Error()
		}
		// Nodes this run started are new and hold no locks: without this the
		// node guard would keep each out of the quorum for MaxTTL.
		if cfg.trustNodes || len(cfg.nodes) == 0 {
			if err := l.TrustNodes(wctx); err != nil {
				im.warning = strings.TrimSpace(im.warning + " " + err.Error())
			}
		}
	}
	if len(cfg.nodes) > 0 || cfg.spawn > 0 {
		im.health = l.Health
	}
	cycles := make([]cycler, len(lockers))
	for i, l := range lockers {
		cycles[i] = lockerCycle(l, cfg, classify)
	}
	im.cycle = cycles[0]
	if len(cycles) > 1 {
		im.cycleFor = func(client int) cycler { return cycles[client%len(cycles)] }
	}
	return im, nil
}

// lockerCycle is one cycle of -mode on l.
func lockerCycle(l *redlock.Locker, cfg config, classify func(error) outcome) cycler {
	if cfg.pair != "" {
		return pairCycle(l, cfg, classify)
	}
	switch cfg.mode {
	case "do":
		return func(ctx context.Context, key string) (acq, rel time.Duration, o outcome, err error) {
			t0 := time.Now()
			var t1 time.Time
			err = l.Do(ctx, key, cfg.ttl, func(ctx context.Context, _ *redlock.Lease) error {
				t1 = time.Now()
				hold(ctx, cfg.hold)
				t1 = t1.Add(time.Since(t1)) // the release starts when fn returns
				return nil
			})
			if t1.IsZero() {
				return time.Since(t0), 0, classify(err), err
			}
			return t1.Sub(t0) - cfg.hold, time.Since(t1), classify(err), err
		}
	}
	lock := l.TryLock
	if cfg.mode == "lock" {
		lock = l.Lock
	}
	return func(ctx context.Context, key string) (acq, rel time.Duration, o outcome, err error) {
		t0 := time.Now()
		lease, err := lock(ctx, key, cfg.ttl)
		acq = time.Since(t0)
		if err != nil {
			return acq, 0, classify(err), err
		}
		hold(ctx, cfg.hold)
		t1 := time.Now()
		err = lease.Unlock(context.WithoutCancel(ctx))
		rel = time.Since(t1)
		if err != nil {
			return acq, rel, failed, err
		}
		return acq, rel, acquired, nil
	}
}

// rawReleaseLua is the compare-and-delete every single-node lock needs.
// It goes by the digest the node names (newRaw loads it), as the library's
// scripts do: a package-level redis.NewScript would compute its SHA-1 when
// the program starts, which panics under GODEBUG=fips140=only.
const rawReleaseLua = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`

// newRaw is the floor any lock pays: SET NX PX and a compare-and-delete on
// one node, the third-fastest (with -node-latency), so that it is compared
// with what a majority of five waits for.
func newRaw(ctx context.Context, d *deployment, cfg config) *impl {
	clients := d.newClients(ctx, 0)
	idx := 0
	if len(cfg.latency) > 0 {
		order := make([]int, len(cfg.latency))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return int(cfg.latency[a] - cfg.latency[b]) })
		idx = order[min(2, len(order)-1)]
	}
	c := clients[idx]
	rawRelease, names := luascript.New(rawReleaseLua), new(luascript.Names)
	_ = names.Learn(ctx, c, rawRelease) // else it goes as EVAL, and a failing node shows in the cycles
	return &impl{
		name:  "raw",
		about: fmt.Sprintf("single node %d: SET NX PX + compare-and-delete (the floor)", idx),
		drain: func() {},
		cycle: func(ctx context.Context, key string) (acq, rel time.Duration, o outcome, err error) {
			var b [16]byte
			rand.Read(b[:])
			value := hex.EncodeToString(b[:])
			t0 := time.Now()
			ok, err := c.SetNX(ctx, key, value, cfg.ttl).Result()
			acq = time.Since(t0)
			switch {
			case err != nil:
				return acq, 0, failed, err
			case !ok:
				return acq, 0, contended, nil
			}
			hold(ctx, cfg.hold)
			t1 := time.Now()
			err = names.Run(context.WithoutCancel(ctx), c, rawRelease, []string{key}, value).Err()
			rel = time.Since(t1)
			if err != nil {
				return acq, rel, failed, err
			}
			return acq, rel, acquired, nil
		},
	}
}

// newRedsync is github.com/go-redsync/redsync/v4, the library teams would
// otherwise pick, with its defaults or with fail-fast.
func newRedsync(ctx context.Context, d *deployment, cfg config, failFast bool) *impl {
	var pools []redsyncredis.Pool
	for _, c := range d.newClients(ctx, 0) {
		pools = append(pools, redsyncgoredis.NewPool(c))
	}
	rs := redsync.New(pools...)
	opts := []redsync.Option{redsync.WithExpiry(cfg.ttl)}
	name, about := "redsync", "go-redsync/redsync/v4 defaults"
	if failFast {
		opts = append(opts, redsync.WithFailFast(true))
		name, about = "redsync-failfast", "go-redsync/redsync/v4 with WithFailFast(true)"
	}
	return &impl{
		name:  name,
		about: about,
		drain: func() {},
		cycle: func(ctx context.Context, key string) (acq, rel time.Duration, o outcome, err error) {
			m := rs.NewMutex(key, opts...)
			t0 := time.Now()
			if cfg.mode == "trylock" {
				err = m.TryLockContext(ctx)
			} else {
				err = m.LockContext(ctx)
			}
			acq = time.Since(t0)
			if err != nil {
				// redsync says ErrFailed both for contention and for too many
				// failed nodes; it is counted as contention here.
				var taken *redsync.ErrTaken
				if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
					return acq, 0, contended, err
				}
				return acq, 0, failed, err
			}
			hold(ctx, cfg.hold)
			t1 := time.Now()
			_, err = m.UnlockContext(context.WithoutCancel(ctx))
			rel = time.Since(t1)
			if err != nil {
				return acq, rel, failed, err
			}
			return acq, rel, acquired, nil
		},
	}
}

// pairCycle locks two keys a cycle (the key and KEY:pair), as a transfer
// between two accounts does: in one multi-key lease (cfg.pair "multi"), or
// one TryLock after the other, released in reverse (cfg.pair
// "sequential"; a second key found taken releases the first).
func pairCycle(l *redlock.Locker, cfg config, classify func(error) outcome) cycler {
	return func(ctx context.Context, key string) (acq, rel time.Duration, o outcome, err error) {
		keys := []string{key, key + ":pair"}
		t0 := time.Now()
		var leases []*redlock.Lease
		if cfg.pair == "multi" {
			var lease *redlock.Lease
			if lease, err = l.TryLockMulti(ctx, keys, cfg.ttl); err == nil {
				leases = append(leases, lease)
			}
		} else {
			for _, k := range keys {
				var lease *redlock.Lease
				if lease, err = l.TryLock(ctx, k, cfg.ttl); err != nil {
					break
				}
				leases = append(leases, lease)
			}
		}
		acq = time.Since(t0)
		if err != nil {
			for _, lease := range leases {
				_ = lease.Unlock(context.WithoutCancel(ctx))
			}
			return acq, 0, classify(err), err
		}
		hold(ctx, cfg.hold)
		t1 := time.Now()
		for i := len(leases) - 1; i >= 0; i-- {
			if e := leases[i].Unlock(context.WithoutCancel(ctx)); e != nil {
				err = e
			}
		}
		rel = time.Since(t1)
		if err != nil {
			return acq, rel, failed, err
		}
		return acq, rel, acquired, nil
	}
}
