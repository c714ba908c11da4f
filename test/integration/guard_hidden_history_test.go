package integration

// Flows that hide a node's history from the guard's failover rule and
// eviction watch (statistics reset, a promoted replica restarted from its
// AOF, a replication ID renamed by a master's first replica). Each granted
// a held lock a second time before examine.lua was fixed for it (the doc
// comments say what the guard did then). Each has a control subtest that
// differs by one step and was refused all along.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/redlock/redlock/test/integration/procs"
)

// TestResetStatDoesNotHideAFailover: the failover rule keys on
// total_net_repl_input_bytes > 0 ("this process read a replication
// stream"). CONFIG RESETSTAT zeroes that counter (Redis 7.0 resets
// stat_net_repl_input_bytes), so a promoted replica on which an operator
// or a monitoring tool reset the statistics before the guard's first
// examination is judged by the disk/age rule instead: an old replica is let
// in at once, although its history was not covered (WaitReplicas 0) and it
// lacks A's grant. Control: the same flow without RESETSTAT is quarantined.
func TestResetStatDoesNotHideAFailover(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run(map[bool]string{false: "control", true: "RESETSTAT"}[reset], func(t *testing.T) {
			ctx := t.Context()
			const key = "it:hidden-resetstat-failover"
			bin := procs.Binary(t, harness.SuiteServer(), "server")
			port, err := procs.FreePort()
			require.NoError(t, err)
			primary := procs.Start(t, "primary", bin, port, "--save", "", "--appendonly", "no")
			replica := procs.ReplicaOf(t, "replica", bin, primary, "--save", "", "--appendonly", "no")
			opts := &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: failoverMaxTTL}
			a := newLockerOn(t, []redlock.Node{closing(t, redis.NewClient(clientOptions(primary.Addr)))}, opts)
			procs.WaitFor(t, 10*time.Second, "the marker reaches the replica", func() (bool, error) {
				want, _ := primary.Client.Get(ctx, guardMarker).Result()
				got, _ := replica.Client.Get(ctx, guardMarker).Result()
				return want != "" && got == want, nil
			})
			waitUpLongerThan(t, replica.Client, failoverMaxTTL+time.Second)
			replica.CutReplication()
			held, err := a.TryLock(ctx, key, failoverTTL)
			require.NoError(t, err)

			primary.Kill()
			require.NoError(t, replica.Client.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
			require.Positive(t, infoInt(t, replica.Client, "stats", "total_net_repl_input_bytes"))
			if reset {
				require.NoError(t, replica.Client.ConfigResetStat(ctx).Err())
				require.Zero(t, infoInt(t, replica.Client, "stats", "total_net_repl_input_bytes"), "RESETSTAT zeroes the counter the rule keys on")
			}
			n, err := replica.Client.Exists(ctx, key).Result()
			require.NoError(t, err)
			require.Zero(t, n, "the promoted replica lacks A's grant")

			b := untrustingLocker(t, []redlock.Node{closing(t, redis.NewClient(clientOptions(replica.Addr)))}, opts)
			second, err := b.TryLock(ctx, key, failoverTTL)
			t.Logf("marker on the promoted replica: %q", replica.Client.Get(ctx, guardMarker).Val())
			requireGuardDecides(t, b, held, second, err, true, "a promoted replica whose stats were reset was let in by its age")
		})
	}
}

// TestResetStatDoesNotHideEvictions: the eviction watch compares
// evicted_keys with the count the marker recorded. CONFIG RESETSTAT sets
// evicted_keys back to 0, below the marker's count, so the next evictions
// (up to that many keys) pass both the companion (evicted <= state.evicted)
// and the examination (evicted > mevicted is false): a held lock key evicted
// by volatile-ttl goes unseen and the lock is granted again. Control: the
// same flow without RESETSTAT is quarantined.
func TestResetStatDoesNotHideEvictions(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run(map[bool]string{false: "control", true: "RESETSTAT"}[reset], func(t *testing.T) {
			ctx := t.Context()
			const key = "it:hidden-resetstat-evict"
			s := startSnapshotServer(t, "--maxmemory-policy", "volatile-ttl")
			admin := s.Admin()
			used := infoInt(t, admin, "memory", "used_memory")
			// A first eviction episode, long before any lock: many keys.
			require.NoError(t, admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+1<<20, 10)).Err())
			require.NoError(t, admin.Set(ctx, "it:victim", "x", time.Minute).Err())
			fillWithTTLUntilEvicted(t, admin, "it:victim")
			value := strings.Repeat("x", 64<<10)
			for i := range 400 {
				require.NoError(t, admin.Set(ctx, "it:episode1:"+strconv.Itoa(i), value, time.Hour).Err())
			}
			before := infoInt(t, admin, "stats", "evicted_keys")
			t.Logf("first episode evicted %d keys", before)
			// Room again; the node may still evict (maxmemory set).
			require.NoError(t, admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+64<<20, 10)).Err())

			node := closing(t, redis.NewClient(clientOptions(s.Addr())))
			l := lockerOver(t, node, &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: guardMaxTTL})
			require.NoError(t, l.TrustNodes(ctx), "the operator declares the memory whole after the episode")
			require.True(t, strings.HasSuffix(admin.Get(ctx, guardMarker).Val(), " "+strconv.FormatInt(before, 10)), "the marker records the episode's count: %q", admin.Get(ctx, guardMarker).Val())
			if reset {
				// The reset hides how many keys were evicted since the
				// marker: the guard quarantines the node rather than
				// guess, until the operator declares it whole again.
				require.NoError(t, admin.ConfigResetStat(ctx).Err())
				_, err := l.TryLock(ctx, key, heldTTL)
				require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "evictions hidden by CONFIG RESETSTAT")
				drain(t, l)
				require.NoError(t, l.TrustNodes(ctx))
			}
			held, err := l.TryLock(ctx, key, heldTTL)
			require.NoError(t, err)

			used = infoInt(t, admin, "memory", "used_memory")
			require.NoError(t, admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+1<<20, 10)).Err())
			fillWithTTLUntilEvicted(t, admin, key)
			require.NoError(t, admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+64<<20, 10)).Err())
			after := infoInt(t, admin, "stats", "evicted_keys")
			t.Logf("second episode: evicted_keys now %d (marker says %d), the held key among them", after, before)
			require.Equal(t, int64(1), admin.Exists(ctx, guardMarker).Val(), "volatile-ttl spared the marker")

			second, err := l.TryLock(ctx, key, heldTTL)
			requireGuardDecides(t, l, held, second, err, true, "an eviction after CONFIG RESETSTAT went unseen")
		})
	}
}

// TestPromotedReplicaRestartedFromAOFIsQuarantined: a replica with appendonly yes is
// promoted (REPLICAOF NO ONE, as Sentinel does) and restarts (a crash, a
// deploy) before any Locker examined it. The new process read no
// replication stream (total_net_repl_input_bytes 0) and loaded AOF, so
// examine.lua takes the old primary's marker for "the same memory, from
// AOF" and keeps it, whatever its history: the failover is never judged,
// and the lock A holds (granted after the replica's link was cut) is granted
// again. Control: the same promoted replica, examined without the restart,
// is quarantined.
func TestPromotedReplicaRestartedFromAOFIsQuarantined(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "control", true: "restarted"}[restart], func(t *testing.T) {
			ctx := t.Context()
			const key = "it:hidden-aof-promoted"
			bin := procs.Binary(t, harness.SuiteServer(), "server")
			port, err := procs.FreePort()
			require.NoError(t, err)
			primary := procs.Start(t, "primary", bin, port, "--save", "", "--appendonly", "no")
			link, err := faultnet.Listen(primary.Addr)
			require.NoError(t, err)
			t.Cleanup(func() { link.Close() })
			_, linkPort, _ := net.SplitHostPort(link.Addr())
			rport, err := procs.FreePort()
			require.NoError(t, err)
			dir := t.TempDir()
			conf := func(replicaof string) string {
				path := filepath.Join(t.TempDir(), "replica.conf")
				body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsave \"\"\nappendonly yes\nappendfsync always\nrepl-diskless-sync-delay 0\n%s", rport, dir, replicaof)
				require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
				return path
			}
			replica := procs.Start(t, "replica", bin, rport, conf("replicaof 127.0.0.1 "+linkPort+"\n"))
			procs.WaitFor(t, 20*time.Second, "replica in sync", func() (bool, error) {
				info, err := replica.Client.Info(ctx, "replication").Result()
				return err == nil && strings.Contains(info, "master_link_status:up"), nil
			})
			replica.WaitAOFReady(t)

			opts := &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: failoverMaxTTL}
			a := newLockerOn(t, []redlock.Node{closing(t, redis.NewClient(clientOptions(primary.Addr)))}, opts)
			procs.WaitFor(t, 10*time.Second, "the marker reaches the replica", func() (bool, error) {
				want, _ := primary.Client.Get(ctx, guardMarker).Result()
				got, _ := replica.Client.Get(ctx, guardMarker).Result()
				return want != "" && got == want, nil
			})
			link.SetBlackhole(true)
			link.DropConnections()
			held, err := a.TryLock(ctx, key, failoverTTL)
			require.NoError(t, err)

			primary.Kill()
			require.NoError(t, replica.Client.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
			if restart {
				replica.Kill()
				replica = procs.Start(t, "replica (restarted)", bin, rport, conf(""))
				require.Zero(t, infoInt(t, replica.Client, "stats", "total_net_repl_input_bytes"))
			}
			require.Equal(t, int64(0), replica.Client.Exists(ctx, key).Val(), "the promoted replica lacks A's grant")
			b := untrustingLocker(t, []redlock.Node{closing(t, redis.NewClient(clientOptions(replica.Addr)))}, opts)
			second, err := b.TryLock(ctx, key, failoverTTL)
			t.Logf("marker on the promoted replica: %q", replica.Client.Get(ctx, guardMarker).Val())
			requireGuardDecides(t, b, held, second, err, true, "a promoted replica restarted from its AOF kept the old primary's marker")
		})
	}
}

// TestClusterFailoverIsNotTakenForAMigration: on a Redis Cluster, a slot
// marker from another node was kept as one a slot migration brought when
// its replid was not the promoted replica's master_replid2. But a master's
// replid also changes when its first replica attaches (Redis creates the
// backlog with a new replication ID), and a Locker with WaitReplicas 0
// never re-examines on that. So: slot markers written on a master with no
// replica, a replica added later, a lease granted (WaitReplicas 0, not
// covered), the master killed and the replica promoted without the grant.
//
//   - retrusted control: TrustNodes again after the replica attached (the
//     marker then names the current history): quarantined all along.
//   - stale replid: the guard let the promoted replica in at once (before
//     the first fix), and the held lock was granted again.
//   - stale replid, migrated in: the same, after another slot migrated into
//     the master: its RESTORE-ASKING is replicated, so the promoted replica's
//     own commandstats named cmdstat_restore-asking, which the guard took
//     for proof of a migration (before the second fix). Now a slot marker
//     counts as a migration's only while CLUSTER NODES shows its node as a
//     live master.
func TestClusterFailoverIsNotTakenForAMigration(t *testing.T) {
	for _, mode := range []string{"retrusted control", "stale replid", "stale replid, migrated in"} {
		t.Run(mode, func(t *testing.T) {
			ctx := t.Context()
			const key = "it:hidden-cluster-replid"
			cluster := procs.StartCluster(t, harness.SuiteServer(), 3, 0)
			slot, err := cluster.Nodes[0].Client.ClusterKeySlot(ctx, key).Result()
			require.NoError(t, err)
			master, err := cluster.MasterOfSlot(ctx, slot)
			require.NoError(t, err)
			// The master announces a proxy's port, so that its replica
			// (which connects to the announced address) can be cut off;
			// the Lockers' clients dial the master itself behind it.
			link, err := faultnet.Listen(master.Addr)
			require.NoError(t, err)
			t.Cleanup(func() { link.Close() })
			dialer := func(ctx context.Context, network, addr string) (net.Conn, error) {
				if addr == link.Addr() {
					addr = master.Addr
				}
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), DialTimeout: time.Second, Dialer: dialer})
			t.Cleanup(func() { cc.Close() })
			opts := &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: failoverMaxTTL}
			a := newLockerOn(t, []redlock.Node{cc}, opts)
			marker := "redlock:memory:{" + keyTagOfSlot(t, master.Client, slot) + "}"
			before := master.Client.Get(ctx, marker).Val()
			require.NotEmpty(t, before, "TrustNodes wrote the slot marker")

			_, linkPort, _ := net.SplitHostPort(link.Addr())
			require.NoError(t, master.Client.ConfigSet(ctx, "cluster-announce-port", linkPort).Err())
			replica := cluster.AddMaster(t)
			masterID, err := master.Client.Do(ctx, "CLUSTER", "MYID").Text()
			require.NoError(t, err)
			procs.WaitFor(t, 30*time.Second, "the added node sees the master at the proxy", func() (bool, error) {
				nodes, err := replica.Client.ClusterNodes(ctx).Result()
				return err == nil && strings.Contains(nodes, masterID+" "+link.Addr()), err
			})
			require.NoError(t, replica.Client.Do(ctx, "CLUSTER", "REPLICATE", masterID).Err())
			procs.WaitFor(t, 30*time.Second, "the added node replicates the slot's master", func() (bool, error) {
				info, err := replica.Client.Info(ctx, "replication").Result()
				return err == nil && strings.Contains(info, "master_link_status:up"), err
			})
			t.Logf("master after its first replica attached: %v; slot marker %q", replidOf(t, master.Client), before)
			switch mode {
			case "retrusted control":
				require.NoError(t, a.TrustNodes(ctx))
			case "stale replid, migrated in":
				// Another slot (its slot marker a key of it) moves from
				// another master into the lock key's master.
				var other string
				for i := 0; ; i++ {
					other = "it:hidden-other-" + strconv.Itoa(i)
					m, err := cc.MasterForKey(ctx, other)
					require.NoError(t, err)
					if a := m.Options().Addr; a != master.Addr && a != link.Addr() {
						break
					}
				}
				require.NoError(t, cc.Set(ctx, other, "x", 0).Err())
				move, err := cluster.MoveSlotTo(ctx, cc, other, master)
				require.NoError(t, err)
				require.NoError(t, move.Begin(ctx))
				require.NoError(t, move.Finish(ctx))
				procs.WaitFor(t, 10*time.Second, "the replica counts the replicated RESTORE-ASKING", func() (bool, error) {
					return strings.Contains(commandStats(t, replica.Client), "cmdstat_restore-asking:"), nil
				})
			}
			procs.WaitFor(t, 10*time.Second, "the marker reaches the replica", func() (bool, error) {
				want := master.Client.Get(ctx, marker).Val()
				conn := replica.Client.Conn()
				defer conn.Close()
				if err := conn.ReadOnly(ctx).Err(); err != nil {
					return false, err
				}
				got, err := conn.Get(ctx, marker).Result()
				return got == want, err
			})
			link.SetBlackhole(true)
			link.DropConnections()
			held, err := a.TryLock(ctx, key, failoverTTL)
			require.NoError(t, err)
			master.Kill()
			procs.WaitFor(t, 30*time.Second, "the cluster promotes the replica", func() (bool, error) {
				m, err := cluster.MasterOfSlot(ctx, slot)
				return err == nil && m == replica, err
			})
			require.Zero(t, replica.Client.Exists(ctx, key).Val(), "the promoted replica lacks A's grant")
			t.Logf("promoted: %v; slot marker %q", replidOf(t, replica.Client), replica.Client.Get(ctx, marker).Val())
			b := untrustingLocker(t, []redlock.Node{cluster.Client(t)}, opts)
			var second *redlock.Lease
			procs.WaitFor(t, 10*time.Second, "B reaches the promoted master", func() (bool, error) {
				second, err = b.TryLock(ctx, key, failoverTTL)
				return err == nil || errors.Is(err, redlock.ErrNodeQuarantined), nil
			})
			t.Logf("slot marker after B's examination: %q", replica.Client.Get(ctx, marker).Val())
			requireGuardDecides(t, b, held, second, err, true, "a cluster failover whose slot marker predates the master's first replica was taken for a migration")
		})
	}
}

// keyTagOfSlot finds the hash tag the library uses for slot (its slot
// markers are "redlock:memory:{tag}"): the marker key on the slot's
// master that hashes to slot.
func keyTagOfSlot(t *testing.T, c *redis.Client, slot int64) string {
	t.Helper()
	keys, err := c.ClusterGetKeysInSlot(t.Context(), int(slot), 10).Result()
	require.NoError(t, err)
	for _, k := range keys {
		if tag, ok := strings.CutPrefix(k, "redlock:memory:{"); ok {
			return strings.TrimSuffix(tag, "}")
		}
	}
	t.Fatalf("no slot marker in slot %d (keys %v)", slot, keys)
	return ""
}

// replidOf is the server's master_replid and master_replid2.
func replidOf(t *testing.T, c *redis.Client) string {
	info := c.Info(t.Context(), "replication").Val()
	var out []string
	for _, l := range strings.Split(info, "\r\n") {
		if strings.HasPrefix(l, "master_replid") {
			out = append(out, l)
		}
	}
	return strings.Join(out, " ")
}
