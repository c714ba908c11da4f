package guard

import (
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/redlock/internal/reply"
)

// How the node guard sees evictions. Lock nodes should run with
// maxmemory-policy noeviction (Durability reports it). Where a node may
// evict (maxmemory set, and any other policy), an eviction can take a held
// lock key, and the node could grant the lock again:
//
//   - A policy that takes any key (allkeys-*) may take the guard's marker
//     with it. examine.lua then finds the marker missing on a process that
//     evicted keys: its memory began now.
//   - A policy that spares the marker (volatile-ttl evicts the keys that
//     expire soonest, and the marker expires a century ahead; volatile-lru
//     and volatile-lfu may keep a busy marker) leaves it standing. So the
//     marker records the keys its process had evicted when it was written,
//     and on a node that may evict, every guarded batch carries INFO stats
//     (the eviction companion): a count above the marker's sends the guard
//     to examine again, and the examination finds that the process evicted
//     keys since: its memory began now, and the node is quarantined for
//     MaxTTL.
//
// The examination reads the policy (INFO memory), so a policy set at run
// time is seen at the node's next examination, not before. Health reports
// the policy as the node states it now.

// statsInfoArgs is the eviction companion: shared, never written.
var statsInfoArgs = []any{"info", "stats"}

// evictedIn reads the eviction companion (INFO stats): how many keys the
// process has evicted (see guard.go).
func evictedIn(cmd *redis.StringCmd) (int64, error) {
	info, err := cmd.Result()
	if err != nil {
		const what = "INFO stats (the guard's check for evictions)"
		if reply.DeniedByACL(err) {
			return 0, reply.Denied(what, err)
		}
		return 0, fmt.Errorf("redlock: %s: %w", what, err)
	}
	v, ok := reply.InfoField(info, "evicted_keys:")
	if !ok {
		return 0, fmt.Errorf("redlock: INFO stats (the guard's check for evictions) says no evicted_keys")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redlock: INFO stats (the guard's check for evictions): evicted_keys %q", v)
	}
	return n, nil
}
