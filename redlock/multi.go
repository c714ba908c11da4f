package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/internal/hashtag"
)

// Leases over several keys (TryLockMulti, LockMulti).
//
// A transfer between two accounts needs both locked. Two locks taken one
// after the other cost two rounds, and two callers that name them in
// opposite orders can each hold one and wait for the other. A multi-key
// lease is one acquisition: on each node one script sets every key, or
// none if another value holds any of them (acquire.lua), so a node
// grants the whole set or nothing, and the Redlock vote runs over those
// grants exactly as for one key (validity: TTL less the elapsed time and
// the drift allowance). Keys are de-duplicated and sorted: {a,b} and {b,a}
// are the same lease, and two callers naming them in either order contend
// for it like two callers of one key. Neither can hold a part: there is no
// partial lease, so there is no deadlock to wait in.
//
// The lease is released, extended and checked as a whole, by the scripts
// every lease uses (release.lua, extend.lua, check.lua: all or nothing for
// the writes; a lease of one key is a lease of n = 1). With
// Options.Fencing each key gets its own token from its own counter
// (Lease.TokenOf), the same counters single-key leases of those keys use:
// a resource guarded by key a's tokens sees them grow across single-key
// leases of a and multi-key leases that include a. One token for the set
// would need a counter of its own, which orders nothing against the
// single-key leases of its keys.

// TryLockMulti makes one attempt to acquire one lease over every key in
// keys, for ttl: on each node all of them or none. It returns the lease, or
// an error as TryLock's (errors.Is(err, ErrNotObtained) when another holder
// has any of the keys). Keys are de-duplicated and their order does not
// matter; at most MaxMultiKeys. On a Redis Cluster node
// (*redis.ClusterClient) the keys must share a hash slot (give them one
// {tag}), and every key must be able to carry one (no '}' without a
// {tag}). One distinct key makes an ordinary single-key lease.
//
// The lease's Key is the first of its keys in sorted order, Keys all of
// them; Extend, Check and Unlock act on all of them together.
func (l *Locker) TryLockMulti(ctx context.Context, keys []string, ttl time.Duration) (*Lease, error) {
	if err := l.made("TryLockMulti"); err != nil {
		return nil, err
	}
	req, err := l.multiRequest(ctx, "acquire", keys, ttl)
	if err != nil {
		return nil, err
	}
	return l.attempt(ctx, req, 1)
}

// LockMulti acquires one lease over keys for ttl (see TryLockMulti), trying
// again until it wins or ctx ends, as Lock does. It does not queue behind
// this Locker's Lock calls nor join the keys' lines (a multi-key lease
// takes no turns): between attempts it waits a random delay in
// [RetryDelay, RetryDelay+RetryJitter), longer while its attempts split
// the nodes with other contenders, and its attempts stop waiting for slow
// nodes once one refused (as Lock's do). Give ctx a deadline to bound the
// wait.
func (l *Locker) LockMulti(ctx context.Context, keys []string, ttl time.Duration) (*Lease, error) {
	if err := l.made("LockMulti"); err != nil {
		return nil, err
	}
	req, err := l.multiRequest(ctx, "acquire", keys, ttl)
	if err != nil {
		return nil, err
	}
	req.yield = true
	var tries retries
	for {
		lease, err := l.attempt(ctx, req, tries.attempts+1)
		if err == nil {
			return lease, nil
		}
		if tries.lost(ctx, &req, err) {
			if errors.Is(err, ErrNotDurable) {
				return nil, err
			}
			return nil, tries.gaveUp(ctx, req.describe(), err)
		}
		timer := time.NewTimer(drift.Add(l.retryWait(), l.splitBackoff(tries.split)))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, tries.gaveUp(ctx, req.describe(), fmt.Errorf("redlock: lock %s: %w", req.describe(), contextError(ctx)))
		}
	}
}

// multiRequest validates a multi-key acquisition: the keys de-duplicated
// and sorted, each a valid key that can carry a hash tag (its tombstone,
// and with fencing its counter, must share its slot), one slot for all on
// a Redis Cluster node. One distinct key makes an ordinary request.
func (l *Locker) multiRequest(ctx context.Context, op string, keys []string, ttl time.Duration) (request, error) {
	if ctx == nil {
		return request{}, fmt.Errorf("redlock: %s: nil context", op)
	}
	if len(keys) == 0 {
		return request{}, fmt.Errorf("redlock: %s: no keys", op)
	}
	sorted := slices.Compact(slices.Sorted(slices.Values(keys)))
	if len(sorted) == 1 {
		return l.request(ctx, op, sorted[0], ttl)
	}
	if len(sorted) > MaxMultiKeys {
		return request{}, fmt.Errorf("redlock: %s: %d distinct keys: a lease covers at most MaxMultiKeys (%d)", op, len(sorted), MaxMultiKeys)
	}
	for _, k := range sorted {
		if err := checkKey(ctx, op, k); err != nil {
			return request{}, err
		}
		if _, _, err := auxiliaryKeys(k); err != nil {
			return request{}, fmt.Errorf("redlock: %s %q: a multi-key lease's keys need hash tags: %w", op, k, err)
		}
	}
	if err := l.checkSlots(op, sorted); err != nil {
		return request{}, err
	}
	req, err := l.request(ctx, op, sorted[0], ttl)
	if err != nil {
		return request{}, err
	}
	req.multi = sorted
	req.counter, req.record = "", ""
	if l.opts.Fencing && op == "acquire" {
		req.counters, req.records = make([]string, len(sorted)), make([]string, len(sorted))
		for i, k := range sorted {
			req.counters[i], _ = counterKey(k) // checked above
			req.records[i], _ = tokenRecordKey(k)
		}
	}
	return req, nil
}

// checkSlots refuses keys that a node cannot run one script over: on a
// Redis Cluster node, keys in different hash slots (the cluster would
// refuse the script with CROSSSLOT on every attempt, or worse, a partial
// lease would be possible if the keys were sent apart); on a Ring of
// several shards, any set of keys (a script runs on its first key's shard,
// where a single-key lease of another key would not look).
func (l *Locker) checkSlots(op string, keys []string) error {
	for _, n := range l.nodes {
		switch c := n.Node.(type) {
		case *redis.ClusterClient:
			slot := hashtag.Slot(keys[0])
			for _, k := range keys[1:] {
				if s := hashtag.Slot(k); s != slot {
					return fmt.Errorf("redlock: %s: %s is a Redis Cluster, and keys %q (slot %d) and %q (slot %d) are in different hash slots: give a multi-key lease's keys one {tag}", op, n.name, keys[0], slot, k, s)
				}
			}
		case *redis.Ring:
			if len(c.Options().Addrs) > 1 {
				return fmt.Errorf("redlock: %s: %s is a *redis.Ring of %d shards: a multi-key lease needs each node to be one server or a Redis Cluster", op, n.name, len(c.Options().Addrs))
			}
		}
	}
	return nil
}

// describe names a request's key or keys for an error.
func (r request) describe() string {
	if r.multi == nil {
		return strconv.Quote(r.key)
	}
	return describeKeys(r.multi)
}

// describeKeys names a multi-key lease's keys for an error: {"a", "b"}.
func describeKeys(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(k)
	}
	return "{" + strings.Join(q, ", ") + "}"
}

// Keys returns the lease's keys: the one key of a single-key lease, or
// every key of a multi-key lease, sorted.
func (l *Lease) Keys() []string {
	if l == nil {
		return nil
	}
	if len(l.keys) == 0 {
		return []string{""} // a zero Lease, not made by a Locker: as Key answers
	}
	return slices.Clone(l.keys)
}

// TokenOf returns the fencing token of key, one of the lease's keys, or 0
// (key not among them, or no Options.Fencing). Each key's tokens come from
// its own counter, which single-key leases of the key share: pass a key's
// token with every write to what that key protects.
func (l *Lease) TokenOf(key string) uint64 {
	if l == nil || l.tokens == nil {
		return 0
	}
	if i, found := slices.BinarySearch(l.keys, key); found {
		return l.tokens[i]
	}
	return 0
}

// name is the lease's key, or keys, for an error.
func (l *Lease) name() string {
	if len(l.keys) == 1 {
		return strconv.Quote(l.keys[0])
	}
	return describeKeys(l.keys)
}

// hold gives the lease its keys, key alone or multi (a multi-key
// request's), and with fencing their tokens (tokens for several keys,
// token for one).
func (l *Lease) hold(key string, multi []string, fenced bool, token uint64, tokens []uint64) {
	if multi == nil {
		l.key[0], l.keys = key, l.key[:]
	} else {
		l.keys = multi
	}
	switch {
	case !fenced:
	case tokens != nil:
		l.tokens = tokens
	default:
		l.token[0], l.tokens = token, l.token[:]
	}
}

// multi is the lease's keys where it has several, nil for one: a
// request's shape (see request), for the release and its waiters.
func (l *Lease) multi() []string {
	if len(l.keys) > 1 {
		return l.keys
	}
	return nil
}
