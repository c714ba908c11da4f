package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/hashtag"
	"github.com/redlock/redlock/quorum"
)

// Fencing tokens (Options.Fencing).
//
// A lease can end under a holder that is paused or whose write is slow in the
// network; the lock cannot stop that holder from writing afterwards, but the
// resource can, if every write carries a token that grows with each
// acquisition and the resource rejects one lower than it has seen.
//
// Each node keeps a permanent counter per lock key. Phase 1, in the acquiring
// script, increments it on every node that grants. The client takes t, the
// largest counter among the nodes that granted before the decision; taking
// the maximum alone would not be monotonic (a node left high by an earlier
// failed attempt could make one acquisition's maximum exceed what a later one
// sees on other nodes). So phase 2 raises the counter to t, while the key
// still holds this value, on the granting nodes; the acquisition succeeds only
// if phase 2 succeeded on a majority within the validity measured from before
// phase 1.
//
// Order: if acquisition A returned before B began, B's phase-1 majority meets
// A's phase-2 majority in some node whose counter was already >= t_A when B
// incremented it, so t_B > t_A. Uniqueness: a node's INCR results never
// repeat (its counter only grows), and the token carries t together with the
// label of a node where t was this acquisition's own INCR result:
// token = t<<8 | label. The label must name the same server in every
// process, so it is the node's rank among the nodes' addresses sorted, not
// its place in the list given to New (two processes may list the servers in
// different orders); processes must name the servers by the same addresses.
// Both hold only while nodes keep their counters: run them with AOF and
// appendfsync always, and maxmemory-policy noeviction
// (see Locker.Durability). Counters never expire: expiring one would restart
// it below tokens already issued. Each costs one small key per lock name per
// node.

// tokenNodeBits is how many low bits of a token name the node.
const tokenNodeBits = 8

// maxFencingNodes is the most nodes a fencing Locker may have.
const maxFencingNodes = 1 << tokenNodeBits

// maxCounter keeps t<<8 within a uint64.
const maxCounter = 1<<(64-tokenNodeBits) - 1

// counterSuffix ends every fencing counter's key.
const counterSuffix = ":fencing"

// counterKey returns the key of key's fencing counter, in key's hash slot.
func counterKey(key string) (string, error) {
	k, err := hashtag.Beside(key, counterSuffix)
	if err != nil {
		return "", fmt.Errorf("redlock: fencing: %w", err)
	}
	return k, nil
}

// counterOf reports whether key is the fencing counter of some lock, and of
// which. No lock may take such a name: it would find the counter (a
// contention that never ends), or plant a value where INCR needs a number.
func counterOf(key string) (lock string, ok bool) {
	p, found := strings.CutSuffix(key, counterSuffix)
	if !found {
		return "", false
	}
	var candidates []string
	if len(p) > 2 && p[0] == '{' && p[len(p)-1] == '}' {
		candidates = append(candidates, p[1:len(p)-1]) // an untagged lock's counter is {lock}+suffix
	}
	candidates = append(candidates, p) // a tagged one's is lock+suffix
	for _, c := range candidates {
		if k, err := counterKey(c); err == nil && k == key {
			return c, true
		}
	}
	return "", false
}

// acquireFencedCommand is phase 1: SET NX PX and, if set, INCR.
func acquireFencedCommand(key, counter, value string, ms int64) command {
	return scriptCommand(acquireFencedScript, []string{key, counter}, value, ms).of(value, roleSets).replicated().guardedBy()
}

// readFenced reads phase 1's reply, storing node i's counter in counters[i].
func readFenced(counters []uint64) reader {
	return func(i int, cmd *redis.Cmd) (Outcome, error) {
		o, c, err := parseFenced(cmd)
		counters[i] = c
		return o, err
	}
}

func parseFenced(cmd *redis.Cmd) (Outcome, uint64, error) {
	res, err := cmd.Slice()
	if err != nil {
		return Failed, 0, err
	}
	if len(res) != 2 {
		return Failed, 0, fmt.Errorf("redlock: unexpected fencing reply %v", res)
	}
	if code, _ := res[0].(int64); code != 1 {
		return Taken, 0, nil
	}
	s, _ := res[1].(string)
	c, err := strconv.ParseUint(s, 10, 64)
	if err != nil || c > maxCounter {
		return Failed, 0, fmt.Errorf("redlock: fencing counter %q on the node is not usable", s)
	}
	return Granted, c, nil
}

// fence runs phase 2: with the phase-1 round won and counters the phase-1
// replies, it raises the counter to t on every node that granted, and
// returns the token, or the round's error.
func (l *Locker) fence(ctx context.Context, req request, value string, phase1 *quorum.Round[Outcome], tally quorum.Tally[Outcome], counters []uint64, until time.Time) (uint64, error) {
	var t uint64
	owner := -1
	for i, v := range tally.Votes {
		if v.Accepted && (owner < 0 || counters[i] > t) {
			t, owner = counters[i], i
		}
	}
	want := strconv.FormatUint(t, 10)
	// Phase 2 goes to the nodes that granted phase 1. A pipelined node whose
	// phase-1 reply is still outstanding gets it too, queued behind phase 1:
	// the script raises the counter only where the key holds this value,
	// which is as safe there as on any granting node.
	notGranted := func(i int) error {
		select {
		case <-phase1.Settled(i):
			if o, err := phase1.Result(i); err != nil || o != Granted {
				return errNotGranted
			}
		default:
		}
		return nil
	}
	c := scriptCommand(fenceScript, []string{req.key, req.counter}, value, want).of(value, roleFences).replicated()
	phase2 := l.fanOut(ctx, fan{after: phase1, skip: notGranted, timeout: l.opts.NodeTimeout}, c, readScript)
	left := until.Sub(l.opts.Clock.Now())
	if left <= 0 {
		return 0, l.roundError(ctx, "acquire", acquireFencedCommand(req.key, req.counter, value, req.ms), tally) // validity used up in phase 1
	}
	tally2 := phase2.Decide(ctx, min(l.opts.NodeTimeout, left), granted)
	if !tally2.Won {
		e := l.roundError(ctx, "acquire", c, tally2)
		e.Op = "acquire (fencing phase)"
		return 0, e
	}
	return t<<tokenNodeBits | l.nodes[owner].label, nil
}

// errNotGranted is phase 2's answer for a node that did not grant phase 1.
var errNotGranted = errors.New("redlock: node did not grant the acquisition")

// ErrNotDurable is returned, when Options.RequireDurable is set, by a fenced
// acquisition while a majority of nodes would not keep their fencing
// counters across a crash. Locker.Durability says which nodes fall short.
var ErrNotDurable = errors.New("redlock: nodes would not keep fencing counters across a crash")

// NodeDurability is one node's persistence settings, as Durability reads them.
type NodeDurability struct {
	Node            int
	Name            string
	AppendOnly      string // "yes" needed
	AppendFsync     string // "always" needed
	MaxmemoryPolicy string // "noeviction" needed
	Durable         bool   // all three as needed
	// Evicts says the node may evict keys, lock keys among them: maxmemory
	// is set and its policy is not noeviction. The node guard then watches
	// its evictions (see eviction.go), at the cost of INFO stats in every
	// guarded batch, and quarantines it after one.
	Evicts bool
	Err    error // CONFIG GET failed (not permitted, or unreachable)
}

// Durability reads every node's appendonly, appendfsync and
// maxmemory-policy (CONFIG GET, where permitted) and reports which nodes
// would keep fencing counters across a crash: AOF on, fsync on every write,
// and no eviction. The order of fencing tokens holds only while a majority
// of nodes keep their counters.
func (l *Locker) Durability(ctx context.Context) []NodeDurability {
	if l == nil || ctx == nil {
		return nil
	}
	out := make([]NodeDurability, len(l.nodes))
	var wg sync.WaitGroup
	for i, n := range l.nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, max(l.opts.NodeTimeout, time.Second))
			defer cancel()
			out[i] = n.durability(ctx)
		})
	}
	wg.Wait()
	return out
}

func (n node) durability(ctx context.Context) NodeDurability {
	d := NodeDurability{Node: n.index, Name: n.name}
	res, err := n.Do(ctx, "CONFIG", "GET", "appendonly", "appendfsync", "maxmemory-policy", "maxmemory").Result()
	if err != nil {
		err = denied("CONFIG GET (Durability reads appendonly, appendfsync, maxmemory-policy, maxmemory)", err)
		d.Err = fmt.Errorf("CONFIG GET: %w", err)
		return d
	}
	settings := map[string]string{}
	switch r := res.(type) {
	case []any: // RESP2: name, value, name, value...
		for i := 0; i+1 < len(r); i += 2 {
			k, _ := r[i].(string)
			v, _ := r[i+1].(string)
			settings[k] = v
		}
	case map[any]any: // RESP3
		for k, v := range r {
			ks, _ := k.(string)
			vs, _ := v.(string)
			settings[ks] = vs
		}
	}
	d.AppendOnly, d.AppendFsync, d.MaxmemoryPolicy = settings["appendonly"], settings["appendfsync"], settings["maxmemory-policy"]
	d.Durable = d.AppendOnly == "yes" && d.AppendFsync == "always" && d.MaxmemoryPolicy == "noeviction"
	d.Evicts = evicts(settings["maxmemory"], d.MaxmemoryPolicy)
	return d
}

// durableCheck caches the nodes' verdict on durability, for
// Options.RequireDurable, so that CONFIG GET is not sent on every
// acquisition. Only verdicts the nodes gave are cached: a check that a
// caller's deadline or a network failure cut short decides nothing.
type durableCheck struct {
	mu      sync.Mutex
	checked time.Time // zero: no verdict yet
	err     error     // the verdict: nil, or ErrNotDurable with detail
}

// durableRecheck is how long a durability verdict is trusted.
const durableRecheck = 10 * time.Second

func (d *durableCheck) cached(now time.Time) (err error, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.checked.IsZero() || now.Sub(d.checked) >= durableRecheck {
		return nil, false
	}
	return d.err, true
}

func (d *durableCheck) store(now time.Time, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checked, d.err = now, err
}

// requireDurable returns nil when a majority of nodes keep fencing counters
// across a crash, ErrNotDurable when the nodes' answers rule that out, and
// otherwise (nodes unreachable, ctx ended) an error that is the caller's to
// retry: it matches ctx's error when ctx ended. The mutex is not held across
// the round trips, so one slow check holds up no other caller.
func (l *Locker) requireDurable(ctx context.Context) error {
	if err, ok := l.durable.cached(time.Now()); ok {
		return err
	}
	started := time.Now()
	var short, unknown []string
	durable, notDurable := 0, 0
	for _, d := range l.Durability(ctx) {
		var reply redis.Error // the node answered CONFIG GET with an error (not permitted, renamed)
		switch {
		case d.Durable:
			durable++
		case d.Err == nil:
			notDurable++
			short = append(short, fmt.Sprintf("%s: appendonly %s, appendfsync %s, maxmemory-policy %s", d.Name, d.AppendOnly, d.AppendFsync, d.MaxmemoryPolicy))
		case errors.As(d.Err, &reply):
			notDurable++
			short = append(short, fmt.Sprintf("%s: %v", d.Name, d.Err))
		default:
			unknown = append(unknown, fmt.Sprintf("%s: %v", d.Name, d.Err))
		}
	}
	n, need := len(l.nodes), quorum.Majority(len(l.nodes))
	detail := strings.Join(append(short, unknown...), "; ")
	switch {
	case durable >= need:
		l.durable.store(started, nil)
		return nil
	case notDurable > n-need:
		err := fmt.Errorf("%w: %d of %d durable; %s", ErrNotDurable, durable, n, detail)
		l.durable.store(started, err)
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("redlock: checking the nodes' durability: %w", contextError(ctx))
	}
	return fmt.Errorf("redlock: cannot tell whether a majority of nodes is durable: %d durable, %d not, %d did not answer; %s",
		durable, notDurable, len(unknown), detail)
}
