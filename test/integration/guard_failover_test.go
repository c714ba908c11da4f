package integration

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

// The node guard's failover rule (redlock/internal/guard/failover.go): a promoted replica
// is judged by the replication history its memory came from, never by the
// age of its process. Redis replicates asynchronously, so a replica may
// lack its primary's last grants whether it started a minute or a month
// ago; unless every Locker waited for every replica (WaitReplicas at least
// the replicas the node had), the promoted replica is quarantined for
// MaxTTL from when the guard first saw it.

// The failover tests' MaxTTL, and the held lease's TTL: long enough to
// outlive a Sentinel failover (a second to declare the primary down, then
// the election and promotion), short enough that an old replica (one that
// has run for longer than MaxTTL) takes seconds to make.
const (
	failoverMaxTTL = 10 * time.Second
	failoverTTL    = failoverMaxTTL
)

// oneSentinelNode is one Redlock node: a primary without persistence, one
// replica, and a Sentinel that fails the primary over alone once it has
// been silent for a second. Plain processes on 127.0.0.1.
type oneSentinelNode struct {
	bin      string
	primary  *procs.Proc
	replica  *procs.Replica
	sentinel *procs.Proc
}

const sentinelMaster = "m"

// With old, the replica has run for longer than MaxTTL when the Sentinel
// starts: the age at which a rule by age would let it in at once. (Not
// later: a Sentinel that watches the replica for long finds it replicating
// through the test's cut link rather than from the primary's address, and
// points it at the primary itself, around the cut.)
func startOneSentinelNode(t *testing.T, old bool) *oneSentinelNode {
	t.Helper()
	server := harness.SuiteServer()
	n := &oneSentinelNode{bin: procs.Binary(t, server, "server")}
	port, err := procs.FreePort()
	require.NoError(t, err)
	n.primary = procs.Start(t, "primary", n.bin, port, "--save", "", "--appendonly", "no")
	n.replica = procs.ReplicaOf(t, "replica", n.bin, n.primary, "--save", "", "--appendonly", "no")
	if old {
		n.waitOld(t)
	}
	n.sentinel = procs.Sentinel(t, procs.Binary(t, server, "sentinel"), []string{sentinelMaster}, []*procs.Proc{n.primary}, time.Second)
	return n
}

// client is a failover client of the node: it asks the Sentinel for the
// primary and follows failovers.
func (n *oneSentinelNode) client(t *testing.T) redlock.Node {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinelMaster, SentinelAddrs: []string{n.sentinel.Addr}, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// waitReplicaHasMarker waits until the guard's marker as the primary has it
// reached the replica, so that a cut after it keeps the marker there.
func (n *oneSentinelNode) waitReplicaHasMarker(t *testing.T) {
	t.Helper()
	procs.WaitFor(t, 10*time.Second, "the marker reaches the replica", func() (bool, error) {
		want, err := n.primary.Client.Get(t.Context(), guardMarker).Result()
		if err != nil {
			return false, err
		}
		got, err := n.replica.Client.Get(t.Context(), guardMarker).Result()
		return got == want, nil
	})
}

// waitOld waits until the replica's process has run for longer than
// MaxTTL: the age at which a rule by age would let it in at once.
func (n *oneSentinelNode) waitOld(t *testing.T) {
	t.Helper()
	procs.WaitFor(t, 2*failoverMaxTTL, "the replica is older than MaxTTL", func() (bool, error) {
		info, err := n.replica.Client.Info(t.Context(), "server").Result()
		if err != nil {
			return false, err
		}
		_, rest, _ := strings.Cut(info, "uptime_in_seconds:")
		up, _, _ := strings.Cut(rest, "\r\n")
		s, err := strconv.Atoi(up)
		return err == nil && time.Duration(s)*time.Second > failoverMaxTTL+time.Second, err
	})
}

// failOver kills the primary and waits until the Sentinel names the
// replica the primary and the replica knows it.
func (n *oneSentinelNode) failOver(t *testing.T) {
	t.Helper()
	start := time.Now()
	n.primary.Kill()
	procs.WaitFor(t, 30*time.Second, "Sentinel promotes the replica", func() (bool, error) {
		addr, err := n.sentinel.Client.Do(t.Context(), "SENTINEL", "get-master-addr-by-name", sentinelMaster).StringSlice()
		if err != nil || len(addr) != 2 || addr[1] != strconv.Itoa(n.replica.Port) {
			return false, err
		}
		role, err := n.replica.Client.Do(t.Context(), "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master", err
	})
	t.Logf("failover: %v", time.Since(start).Round(time.Millisecond))
}

// TestFailoverIsJudgedByHistoryNotAge: one node (a failover client, one
// replica, a Sentinel), a lease held by A, the primary killed, and B's
// TryLock of the same key on the promoted replica while A's lease is valid.
// For a young replica (started just now) and an old one (running for
// longer than MaxTTL), alike:
//
//   - without WaitReplicas, the replica's replication cut before A's grant:
//     the promoted replica lacks A's key, and B's TryLock is refused as
//     ErrNodeQuarantined. The negative control, NoQuarantine, grants the
//     held lock to B: the double grant that asynchronous replication allows.
//   - with WaitReplicas 1 (every grant reached the one replica), the
//     promoted replica is let in at once: B meets A's key (ErrNotObtained,
//     contention) and A's lease still checks.
//
// Before the rule, the guard let an old replica in at once (a promoted
// replica kept its marker) and a young one too, whatever it had missed.
func TestFailoverIsJudgedByHistoryNotAge(t *testing.T) {
	for _, age := range []string{"young", "old"} {
		t.Run(age, func(t *testing.T) {
			for _, mode := range []string{"guarded", "NoQuarantine control", "WaitReplicas covers"} {
				t.Run(mode, func(t *testing.T) {
					ctx := t.Context()
					const key = "it:failover-history"
					n := startOneSentinelNode(t, age == "old")
					opts := &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: failoverMaxTTL, NoQuarantine: mode == "NoQuarantine control"}
					if mode == "WaitReplicas covers" {
						opts.WaitReplicas = 1
					}
					a := newLockerOn(t, []redlock.Node{n.client(t)}, opts)
					n.waitReplicaHasMarker(t)
					if opts.WaitReplicas == 0 {
						n.replica.CutReplication()
					}
					held, err := a.TryLock(ctx, key, failoverTTL)
					require.NoError(t, err)
					n.failOver(t)
					if opts.WaitReplicas == 0 {
						n, err := n.replica.Client.Exists(ctx, key).Result()
						require.NoError(t, err)
						require.Zero(t, n, "the promoted replica has the key its replication never brought")
					}

					b := untrustingLocker(t, []redlock.Node{n.client(t)}, opts)
					second, err := b.TryLock(ctx, key, failoverTTL)
					left := held.Validity()
					require.Positive(t, left, "A's lease ran out: a second grant would prove nothing")
					switch mode {
					case "guarded":
						require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "B got the lock A holds for %v more, from a %s promoted replica", left, age)
						t.Logf("refused: %v", err)
					case "NoQuarantine control":
						require.NoError(t, err, "the negative control: without the guard the promoted replica grants the held lock again")
						require.NoError(t, second.Unlock(ctx))
					case "WaitReplicas covers":
						require.ErrorIs(t, err, redlock.ErrNotObtained, "B on a %s promoted replica that has every grant", age)
						require.NotErrorIs(t, err, redlock.ErrNodeQuarantined)
						require.NoError(t, held.Check(ctx), "A's lease on the promoted replica")
					}
				})
			}
		})
	}
}

// TestFailoverWordFollowsLockersAndReplicas: the marker's word that every
// grant reaches every replica holds only while it is true, on one primary
// and its replicas (no Sentinel: the test promotes a replica itself).
//
//   - A (WaitReplicas 1) trusts the node with one replica: covered.
//   - B (WaitReplicas 0) takes the word back at its first examination; the
//     grant of that round trip went before it, so it does not count
//     (ErrNodeQuarantined "for this round trip"); B's next TryLock does.
//   - A trusts again (covered), takes a lease, and a second replica joins:
//     A's next TryLock sees more replicas than it waits for in its
//     batch's replication companion, and that round trip's grant does not
//     count either; the marker now says 2 replicas.
//   - The primary dies and the first replica is promoted: it is
//     quarantined, since A's grants were not known to reach every replica.
func TestFailoverWordFollowsLockersAndReplicas(t *testing.T) {
	ctx := t.Context()
	bin := procs.Binary(t, harness.SuiteServer(), "server")
	port, err := procs.FreePort()
	require.NoError(t, err)
	primary := procs.Start(t, "primary", bin, port, "--save", "", "--appendonly", "no")
	first := procs.ReplicaOf(t, "first replica", bin, primary, "--save", "", "--appendonly", "no")
	node := closing(t, redis.NewClient(clientOptions(primary.Addr)))
	opts := &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: failoverMaxTTL, WaitReplicas: 1}
	a := newLockerOn(t, []redlock.Node{node}, opts)
	marker := func() string {
		m, err := primary.Client.Get(ctx, guardMarker).Result()
		require.NoError(t, err)
		return m
	}
	require.Regexp(t, ` 1 1 0$`, marker(), "A trusted the node: waits for 1 replica of 1")

	b := untrustingLocker(t, []redlock.Node{node}, &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: failoverMaxTTL})
	_, err = b.TryLock(ctx, "it:word-b", failoverTTL)
	require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "B's first grant went before its word")
	require.ErrorContains(t, err, "for this round trip")
	require.Regexp(t, ` 0 1 0$`, marker(), "B waits for no replica")
	lb, err := b.TryLock(ctx, "it:word-b", failoverTTL)
	require.NoError(t, err, "B's next round trip counts")
	require.NoError(t, lb.Unlock(ctx))
	drain(t, b)

	require.NoError(t, a.TrustNodes(ctx))
	require.Regexp(t, ` 1 1 0$`, marker())
	held, err := a.TryLock(ctx, "it:word-a", failoverTTL)
	require.NoError(t, err, "covered: one replica, one waited for")
	procs.ReplicaOf(t, "second replica", bin, primary, "--save", "", "--appendonly", "no")
	_, err = a.TryLock(ctx, "it:word-a2", failoverTTL)
	require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "a grant while a replica A does not wait for is attached")
	require.ErrorContains(t, err, "for this round trip")
	require.Regexp(t, ` 1 2 0$`, marker(), "the marker saw the second replica")
	drain(t, a)
	// Every write so far reached the first replica (WAIT 1, and the
	// second's grant failed), so that the promotion below loses nothing
	// but what the rule must assume it lost.
	first.WaitInSync(t)

	primary.Kill()
	require.NoError(t, first.Client.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	promoted := closing(t, redis.NewClient(clientOptions(first.Addr)))
	c := untrustingLocker(t, []redlock.Node{promoted}, &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: failoverMaxTTL})
	_, err = c.TryLock(ctx, "it:word-c", failoverTTL)
	require.Positive(t, held.Validity())
	require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "a promoted replica of a history whose grants were not all waited for")
	require.NotContains(t, err.Error(), "for this round trip", "a quarantine of MaxTTL, not of one round trip")
	t.Logf("refused: %v", err)
}

// TestSnapshotRestartOfAReplicatedPrimaryIsQuarantined: a primary with a
// replica keeps its replication history in its RDB snapshot, and a new
// process that loads it continues that history (master_replid2 and
// second_repl_offset, as a promoted replica has them). It is still a
// restart from an old snapshot, which may lack the latest grants: the
// second TryLock of a lock granted after the SAVE must be quarantined.
// The negative control, NoQuarantine, grants it again. (Before the
// failover rule, the guard took such a process for a promoted replica and
// kept its marker: two holders.)
func TestSnapshotRestartOfAReplicatedPrimaryIsQuarantined(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		t.Run(map[bool]string{true: "guarded", false: "NoQuarantine control"}[guarded], func(t *testing.T) {
			ctx := t.Context()
			const key = "it:snapshot-replicated"
			s := startSnapshotServer(t)
			procs.ReplicaOf(t, "replica", s.bin, s.proc, "--save", "", "--appendonly", "no")
			node := closing(t, redis.NewClient(clientOptions(s.Addr())))
			l := lockerOver(t, node, withTransport(&redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: guardMaxTTL, NoQuarantine: !guarded}))
			require.NoError(t, l.TrustNodes(ctx))
			// The snapshot: the marker and the replication history, no
			// lock (once the replica's full sync has let go of the fork).
			procs.WaitFor(t, 20*time.Second, "SAVE", func() (bool, error) {
				err := s.Admin().Save(ctx).Err()
				return err == nil, err
			})
			held, err := l.TryLock(ctx, key, heldTTL)
			require.NoError(t, err)

			before := s.crashAndRestart(t)
			waitAnswers(t, node)
			s.requireForgot(t, before, key, held.Value())
			info, err := s.Admin().Info(ctx, "replication").Result()
			require.NoError(t, err)
			require.NotContains(t, info, "second_repl_offset:-1", "the new process continues the snapshot's history")

			second, err := l.TryLock(ctx, key, heldTTL)
			requireGuardDecides(t, l, held, second, err, guarded, "the guard took a restart from a snapshot for a promoted replica")
		})
	}
}
