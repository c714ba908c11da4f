package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// Short enough that waiting for a process to be up for longer takes a few
// seconds; long enough that the first lease outlives the fill (a fraction
// of a second) by far.
const (
	evictionMaxTTL  = 2 * time.Second
	evictionHeldTTL = 1900 * time.Millisecond
)

// TestEvictedMarkerQuarantinesTheNode: a process up for longer than MaxTTL,
// with maxmemory-policy allkeys-random, evicts the guard's marker and a held
// lock key (an admin client fills its memory; nothing is flushed). The next
// TryLock of the held key finds the marker missing, and the guard must not
// take the memory for one that began when the process did (its uptime is
// longer than MaxTTL, and its command statistics show no flush): a missing
// marker means the memory began now, and the TryLock fails with
// ErrNodeQuarantined. The negative control, NoQuarantine, shows the same
// flow granting the held lock a second time.
func TestEvictedMarkerQuarantinesTheNode(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(transportName(direct), func(t *testing.T) {
			for _, guarded := range []bool{true, false} {
				t.Run(map[bool]string{true: "guarded", false: "NoQuarantine control"}[guarded], func(t *testing.T) {
					ctx := t.Context()
					const key = "it:guard-eviction"
					s := startSnapshotServer(t, "--maxmemory-policy", "allkeys-random")
					admin := s.Admin()
					// About a megabyte above what the empty process uses:
					// room for the lock and a few filler values, so that
					// a few dozen writes evict every key many times over.
					used := infoInt(t, admin, "memory", "used_memory")
					require.NoError(t, admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+1<<20, 10)).Err())
					waitUpLongerThan(t, admin, evictionMaxTTL)

					node := closing(t, redis.NewClient(clientOptions(s.Addr())))
					l := lockerOver(t, node, &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: evictionMaxTTL, NoAutoPipeline: direct, NoQuarantine: !guarded})
					require.NoError(t, l.TrustNodes(ctx))
					held, err := l.TryLock(ctx, key, evictionHeldTTL)
					require.NoError(t, err)
					gone := []string{key}
					if guarded {
						n, err := admin.Exists(ctx, guardMarker).Result()
						require.NoError(t, err)
						require.Equal(t, int64(1), n, "TrustNodes wrote the marker")
						gone = append(gone, guardMarker)
					}

					start := time.Now()
					writes := fillUntilEvicted(t, admin, gone...)
					require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "0").Err(), "writes work again, and nothing more is evicted")
					evicted := infoInt(t, admin, "stats", "evicted_keys")
					t.Logf("%d filler writes in %v evicted %d keys, %q among them", writes, time.Since(start), evicted, gone)
					require.Positive(t, evicted, "INFO stats counts no evictions")
					require.NotContains(t, commandStats(t, admin), "cmdstat_flush", "a flush would quarantine the node for the wrong reason")

					second, err := l.TryLock(ctx, key, evictionHeldTTL)
					requireGuardDecides(t, l, held, second, err, guarded, "the guard took an evicted marker for memory begun at the process's start")
				})
			}
		})
	}
}

// fillUntilEvicted writes 64 KB filler values without a TTL through admin,
// a batch at a time, until none of keys exists (an allkeys-random eviction
// takes any key, so whichever goes first, it writes on until all have
// gone). It returns how many values it wrote.
func fillUntilEvicted(t *testing.T, admin *redis.Client, keys ...string) int {
	t.Helper()
	ctx := t.Context()
	value := strings.Repeat("x", 64<<10)
	const batch, maxBatches = 8, 256
	writes := 0
	for range maxBatches {
		_, err := admin.Pipelined(ctx, func(p redis.Pipeliner) error {
			for range batch {
				p.Set(ctx, "it:filler:"+strconv.Itoa(writes), value, 0)
				writes++
			}
			return nil
		})
		require.NoError(t, err, "allkeys-random evicts rather than refuse a write")
		gone := true
		for _, k := range keys {
			n, err := admin.Exists(ctx, k).Result()
			require.NoError(t, err)
			gone = gone && n == 0
		}
		if gone {
			return writes
		}
	}
	require.Failf(t, "not evicted", "%v still exist after %d filler writes", keys, writes)
	return writes
}

// waitUpLongerThan waits until the server's uptime (whole seconds, as INFO
// server says it) is longer than d.
func waitUpLongerThan(t *testing.T, admin *redis.Client, d time.Duration) {
	t.Helper()
	eventually(t, d+5*time.Second, "the server up for longer than MaxTTL", func() (bool, error) {
		return time.Duration(infoInt(t, admin, "server", "uptime_in_seconds"))*time.Second > d, nil
	})
}

// infoInt is the integer field of INFO section.
func infoInt(t *testing.T, admin *redis.Client, section, field string) int64 {
	t.Helper()
	info, err := admin.Info(t.Context(), section).Result()
	require.NoError(t, err)
	_, rest, ok := strings.Cut(info, "\r\n"+field+":")
	require.True(t, ok, "no %s in INFO %s", field, section)
	v, _, _ := strings.Cut(rest, "\r\n")
	n, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err, "INFO %s %s", section, field)
	return n
}

func commandStats(t *testing.T, admin *redis.Client) string {
	t.Helper()
	stats, err := admin.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	return stats
}

// TestEvictionThatSparesTheMarkerQuarantinesTheNode: with
// maxmemory-policy volatile-ttl, a node out of memory evicts the keys
// that expire soonest: a held lock key, long before the guard's marker
// (which expires a century ahead). The marker stands, so only the
// evictions show what happened: the guard must watch them on a node that
// may evict (INFO stats in every guarded batch), and the next TryLock of
// the held key must fail with ErrNodeQuarantined. The negative control,
// NoQuarantine, grants the held lock a second time. (Before, the guard
// looked at evictions only when the marker was missing.)
func TestEvictionThatSparesTheMarkerQuarantinesTheNode(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(transportName(direct), func(t *testing.T) {
			for _, guarded := range []bool{true, false} {
				t.Run(map[bool]string{true: "guarded", false: "NoQuarantine control"}[guarded], func(t *testing.T) {
					ctx := t.Context()
					const key = "it:guard-eviction-ttl"
					s := startSnapshotServer(t, "--maxmemory-policy", "volatile-ttl")
					admin := s.Admin()
					used := infoInt(t, admin, "memory", "used_memory")
					require.NoError(t, admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+1<<20, 10)).Err())

					node := closing(t, redis.NewClient(clientOptions(s.Addr())))
					l := lockerOver(t, node, &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: guardMaxTTL, NoAutoPipeline: direct, NoQuarantine: !guarded})
					require.NoError(t, l.TrustNodes(ctx))
					held, err := l.TryLock(ctx, key, heldTTL)
					require.NoError(t, err)

					writes := fillWithTTLUntilEvicted(t, admin, key)
					require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "0").Err(), "writes work again, and nothing more is evicted")
					n, err := admin.Exists(ctx, guardMarker).Result()
					require.NoError(t, err)
					require.Equal(t, int64(1), n, "volatile-ttl spared the marker")
					t.Logf("%d filler writes evicted %d keys, the lock key among them", writes, infoInt(t, admin, "stats", "evicted_keys"))

					second, err := l.TryLock(ctx, key, heldTTL)
					requireGuardDecides(t, l, held, second, err, guarded, "the guard missed an eviction that spared its marker")
					if guarded {
						h := l.Health()[0]
						require.Equal(t, "volatile-ttl", h.MaxmemoryPolicy)
						require.Contains(t, h.QuarantineCause, "eviction")
					}
				})
			}
		})
	}
}

// fillWithTTLUntilEvicted writes 64 KB filler values that expire in an
// hour (later than any lock, sooner than the guard's marker) until key is
// gone, and returns how many it wrote.
func fillWithTTLUntilEvicted(t *testing.T, admin *redis.Client, key string) int {
	t.Helper()
	ctx := t.Context()
	value := strings.Repeat("x", 64<<10)
	writes := 0
	for range 256 {
		_, err := admin.Pipelined(ctx, func(p redis.Pipeliner) error {
			for range 8 {
				p.Set(ctx, "it:filler:"+strconv.Itoa(writes), value, time.Hour)
				writes++
			}
			return nil
		})
		require.NoError(t, err, "volatile-ttl evicts rather than refuse a write")
		n, err := admin.Exists(ctx, key).Result()
		require.NoError(t, err)
		if n == 0 {
			return writes
		}
	}
	require.Failf(t, "not evicted", "%s still exists after %d filler writes", key, writes)
	return writes
}
