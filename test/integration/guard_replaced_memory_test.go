package integration

// Flows in which a process's memory is replaced or lost without a restart
// (a full resync from its former replica, FLUSHALL or SWAPDB, evictions),
// hidden from the guard by a reset of the statistics or by what a Locker
// already knew of the node. Each granted a held lock a second time before
// the guard was fixed for it (the doc comments say what the guard did
// then). Each has a control subtest that differs by one step and was
// refused all along.

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/redlock/redlock/test/integration/procs"
)

// TestPrimaryRoundTripThroughAReplicaIsQuarantined: P (primary) with replica Q. The guard's
// marker, written by P's process, reaches Q. The replication is cut, A is
// granted a lease on P (WaitReplicas 0). Q is promoted, P is made a replica
// of Q (full resync: P's memory is now Q's, the lease is gone, the marker
// is P's own) and then promoted again (REPLICAOF NO ONE), without anyone
// examining Q meanwhile. examine.lua's first branch keys on "run == id and
// mfed == fed": the marker names P's own process; only fed (bytes read
// from a primary) tells that the memory came from a stream.
//
//   - control: a fresh Locker B examines P: fed > 0, quarantined.
//   - resetstat: CONFIG RESETSTAT on P first (fed back to 0): B's
//     examination takes P's memory for P's own, and B is granted A's lock.
//   - seen demoted: A itself asks again, with no RESETSTAT: its state (PTTL
//     of the marker, SCRIPT EXISTS of its copy) still said "known", since
//     a full resync keeps the process's script cache and brings the very
//     marker back. Now a READONLY from the demoted P (A's round trip
//     while P is a replica) drops A's state. With no round trip of A's to
//     P while it was a replica, A still cannot tell (see
//     docs/failure-models.md).
func TestPrimaryRoundTripThroughAReplicaIsQuarantined(t *testing.T) {
	for _, mode := range []string{"control", "resetstat", "seen demoted"} {
		t.Run(mode, func(t *testing.T) {
			ctx := t.Context()
			const key = "it:replaced-roundtrip"
			bin := procs.Binary(t, harness.SuiteServer(), "server")
			port, err := procs.FreePort()
			require.NoError(t, err)
			p := procs.Start(t, "P", bin, port, "--save", "", "--appendonly", "no")
			q := procs.ReplicaOf(t, "Q", bin, p, "--save", "", "--appendonly", "no")
			opts := &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: failoverMaxTTL}
			a := newLockerOn(t, []redlock.Node{closing(t, redis.NewClient(clientOptions(p.Addr)))}, opts)
			procs.WaitFor(t, 10*time.Second, "the marker reaches Q", func() (bool, error) {
				want, _ := p.Client.Get(ctx, guardMarker).Result()
				got, _ := q.Client.Get(ctx, guardMarker).Result()
				return want != "" && got == want, nil
			})
			t.Logf("marker on P: %q", p.Client.Get(ctx, guardMarker).Val())
			q.CutReplication()
			held, err := a.TryLock(ctx, key, failoverTTL)
			require.NoError(t, err)

			require.NoError(t, q.Client.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
			require.NoError(t, p.Client.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(q.Port)).Err())
			procs.WaitFor(t, 20*time.Second, "P in sync with Q", func() (bool, error) {
				info, err := p.Client.Info(ctx, "replication").Result()
				return err == nil && strings.Contains(info, "master_link_status:up"), nil
			})
			require.Zero(t, p.Client.Exists(ctx, key).Val(), "P's memory is Q's now: the lease is gone")
			if mode == "seen demoted" {
				// A's round trip to P while P is a replica: READONLY.
				_, err := a.TryLock(ctx, "it:replaced-meanwhile", failoverTTL)
				require.ErrorContains(t, err, "READONLY")
				drain(t, a)
			}
			require.NoError(t, p.Client.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
			t.Logf("P fed=%d; marker %q", infoInt(t, p.Client, "stats", "total_net_repl_input_bytes"), p.Client.Get(ctx, guardMarker).Val())
			if mode == "resetstat" {
				require.NoError(t, p.Client.ConfigResetStat(ctx).Err())
			}
			l := a
			if mode != "seen demoted" {
				l = untrustingLocker(t, []redlock.Node{closing(t, redis.NewClient(clientOptions(p.Addr)))}, opts)
			}
			second, err := l.TryLock(ctx, key, failoverTTL)
			t.Logf("marker after: %q", p.Client.Get(ctx, guardMarker).Val())
			requireGuardDecides(t, l, held, second, err, true, "P, whose memory is Q's, was taken for its own memory")
		})
	}
}

// TestMissingMarkerOnAnOldProcessIsQuarantined: an old process (up for longer
// than MaxTTL) loses its keys, marker and held lock with them, without a
// restart. A missing marker means "the memory began when the process did"
// unless INFO commandstats names FLUSHALL/FLUSHDB (or the process evicted
// or read a stream).
//
//   - control: FLUSHALL: quarantined.
//   - flushall+resetstat: FLUSHALL, then CONFIG RESETSTAT (which clears
//     commandstats) before the next round trip: let in by the process's age.
//   - swapdb: SWAPDB 0 1 with db 1 empty empties db 0 as FLUSHDB would:
//     let in by the process's age.
func TestMissingMarkerOnAnOldProcessIsQuarantined(t *testing.T) {
	for _, mode := range []string{"control", "flushall+resetstat", "swapdb"} {
		t.Run(mode, func(t *testing.T) {
			ctx := t.Context()
			const key = "it:replaced-forgotten"
			bin := procs.Binary(t, harness.SuiteServer(), "server")
			port, err := procs.FreePort()
			require.NoError(t, err)
			p := procs.Start(t, "P", bin, port, "--save", "", "--appendonly", "no")
			opts := &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: failoverMaxTTL}
			waitUpLongerThan(t, p.Client, failoverMaxTTL+time.Second)
			a := newLockerOn(t, []redlock.Node{closing(t, redis.NewClient(clientOptions(p.Addr)))}, opts)
			held, err := a.TryLock(ctx, key, failoverTTL)
			require.NoError(t, err)
			switch mode {
			case "control":
				require.NoError(t, p.Client.FlushAll(ctx).Err())
			case "flushall+resetstat":
				require.NoError(t, p.Client.FlushAll(ctx).Err())
				require.NoError(t, p.Client.ConfigResetStat(ctx).Err())
			case "swapdb":
				require.NoError(t, p.Client.Do(ctx, "SWAPDB", "0", "1").Err())
			}
			require.Zero(t, p.Client.Exists(ctx, key, guardMarker).Val(), "the held key and the marker are gone")
			second, err := a.TryLock(ctx, key, failoverTTL)
			t.Logf("marker after: %q", p.Client.Get(ctx, guardMarker).Val())
			requireGuardDecides(t, a, held, second, err, true, "an old process that lost its keys was let in by its age")
		})
	}
}

// TestResetStatDoesNotHideAnEvictedMarker: allkeys-random evicts the held
// key and the marker on an old process. examine.lua's missing-marker branch
// says "evicted > 0: began now"; CONFIG RESETSTAT zeroes evicted_keys.
//
//   - control: no RESETSTAT: quarantined.
//   - resetstat: RESETSTAT after the evictions: let in by the process's age.
func TestResetStatDoesNotHideAnEvictedMarker(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run(map[bool]string{false: "control", true: "resetstat"}[reset], func(t *testing.T) {
			ctx := t.Context()
			const key = "it:replaced-evicted-marker"
			s := startSnapshotServer(t, "--maxmemory-policy", "allkeys-random")
			admin := s.Admin()
			used := infoInt(t, admin, "memory", "used_memory")
			require.NoError(t, admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+1<<20, 10)).Err())
			waitUpLongerThan(t, admin, failoverMaxTTL+time.Second)
			l := lockerOver(t, closing(t, redis.NewClient(clientOptions(s.Addr()))), &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: failoverMaxTTL})
			require.NoError(t, l.TrustNodes(ctx))
			held, err := l.TryLock(ctx, key, failoverTTL)
			require.NoError(t, err)
			fillUntilEvicted(t, admin, key, guardMarker)
			require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "0").Err())
			if reset {
				require.NoError(t, admin.ConfigResetStat(ctx).Err())
			}
			second, err := l.TryLock(ctx, key, failoverTTL)
			t.Logf("marker after: %q", admin.Get(ctx, guardMarker).Val())
			requireGuardDecides(t, l, held, second, err, true, "an evicted marker hidden by RESETSTAT")
		})
	}
}
