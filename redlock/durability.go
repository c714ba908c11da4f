package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock/internal/reply"
)

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
	// its evictions (see internal/guard/eviction.go), at the cost of INFO stats in every
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
		err = reply.Denied("CONFIG GET (Durability reads appendonly, appendfsync, maxmemory-policy, maxmemory)", err)
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

// evicts reports whether a node with these settings may evict keys:
// maxmemory set (not "0", which is no limit) and a policy other than
// noeviction.
func evicts(maxmemory, policy string) bool {
	return maxmemory != "" && maxmemory != "0" && policy != "" && policy != "noeviction"
}
