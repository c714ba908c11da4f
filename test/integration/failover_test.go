package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/redlock/redlock/test/integration/procs"
)

// sentinelNodes is three Redlock nodes, each a primary with one replica,
// watched by one Sentinel that fails a primary over alone (quorum 1) once it
// has been silent for a second. Plain processes: every address is
// 127.0.0.1.
type sentinelNodes struct {
	primaries []*procs.Proc
	replicas  []*procs.Replica
	sentinel  *procs.Proc
	masters   []string
}

func startSentinelNodes(t *testing.T) *sentinelNodes {
	t.Helper()
	server := harness.SuiteServer()
	bin := procs.Binary(t, server, "server")
	s := &sentinelNodes{masters: []string{"m0", "m1", "m2"}}
	for i := range 3 {
		port, err := procs.FreePort()
		require.NoError(t, err)
		p := procs.Start(t, fmt.Sprintf("node %d primary", i), bin, port, "--save", "", "--appendonly", "no")
		s.primaries = append(s.primaries, p)
		s.replicas = append(s.replicas, procs.ReplicaOf(t, fmt.Sprintf("node %d replica", i), bin, p, "--save", "", "--appendonly", "no"))
	}
	s.sentinel = procs.Sentinel(t, procs.Binary(t, server, "sentinel"), s.masters, s.primaries, time.Second)
	return s
}

// clients returns a go-redis failover client per node: each asks the
// Sentinel for its primary and follows failovers.
func (s *sentinelNodes) clients(t *testing.T) []redlock.Node {
	var out []redlock.Node
	for _, m := range s.masters {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: m, SentinelAddrs: []string{s.sentinel.Addr}, DialTimeout: time.Second})
		t.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

// failOver kills the primaries of nodes and waits until the Sentinel names
// each one's replica the primary and the replica knows it.
func (s *sentinelNodes) failOver(t *testing.T, nodes ...int) {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("failover of nodes %v: %v", nodes, time.Since(start).Round(time.Millisecond)) }()
	for _, i := range nodes {
		s.primaries[i].Kill()
	}
	for _, i := range nodes {
		procs.WaitFor(t, 30*time.Second, fmt.Sprintf("Sentinel promotes node %d's replica", i), func() (bool, error) {
			addr, err := s.sentinel.Client.Do(context.Background(), "SENTINEL", "get-master-addr-by-name", s.masters[i]).StringSlice()
			if err != nil || len(addr) != 2 || addr[1] != strconv.Itoa(s.replicas[i].Port) {
				return false, err
			}
			role, err := s.replicas[i].Client.Do(context.Background(), "ROLE").Slice()
			return err == nil && len(role) > 0 && role[0] == "master", err
		})
	}
}

// The control: a failover to replicas that never received the lock. With
// nodes 0 and 1's replication cut, A acquires on all
// three primaries; primaries 0 and 1 die; their replicas come back and are
// promoted, without A's key; B, without the node guard (NoQuarantine),
// acquires while A's lease is still valid. The double grant that
// asynchronous replication allows; a guarded Locker finds the promoted
// replicas quarantined.
func TestFailoverWithoutWaitDoubleGrants(t *testing.T) {
	ctx := t.Context()
	s := startSentinelNodes(t)
	a := newLockerOn(t, s.clients(t), &redlock.Options{NodeTimeout: time.Second})
	require.NoError(t, a.Warm(ctx))
	for _, i := range []int{0, 1} {
		s.replicas[i].CutReplication()
	}
	leaseA, err := a.TryLock(ctx, "failover", time.Minute)
	require.NoError(t, err)
	s.failOver(t, 0, 1)
	// The node guard sees that the promoted replicas' history was not
	// waited for (see TestFailoverIsJudgedByHistoryNotAge).
	guarded := untrustingLocker(t, s.clients(t), &redlock.Options{NodeTimeout: time.Second})
	_, err = guarded.TryLock(ctx, "failover", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "a guarded Locker after the failover")
	drain(t, guarded) // its uncounted grants on the promoted replicas are released before B tries
	b := untrustingLocker(t, s.clients(t), &redlock.Options{NodeTimeout: time.Second, NoQuarantine: true})
	leaseB, err := b.TryLock(ctx, "failover", time.Minute)
	require.NoError(t, err, "B did not get the lock after the failover: the control shows nothing")
	require.Positive(t, leaseA.Validity(), "A's lease ran out before B won")
	require.NoError(t, leaseB.Unlock(ctx))
}

// With WaitReplicas 1: while two replicas are cut off, A's acquisition fails
// with ErrNotReplicated and leaves no key; with the replicas healthy, A
// acquires, two primaries die and their replicas are promoted with A's key,
// and B gets ErrNotObtained. A's failover clients follow the new primaries:
// its lease checks without a new Locker, and extends once the new primaries
// have replicas again (until then the extension is not replicated).
func TestFailoverWithWaitReplicas(t *testing.T) {
	ctx := t.Context()
	s := startSentinelNodes(t)
	opts := &redlock.Options{NodeTimeout: 2 * time.Second, WaitReplicas: 1, Fencing: true}
	a := newLockerOn(t, s.clients(t), opts)
	require.NoError(t, a.Warm(ctx))

	for _, i := range []int{0, 1} {
		s.replicas[i].CutReplication()
	}
	_, err := a.TryLock(ctx, "failover", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotReplicated)
	require.NotErrorIs(t, err, redlock.ErrNotObtained)
	drain(t, a)
	for _, i := range []int{0, 1} {
		s.replicas[i].RestoreReplication()
		s.replicas[i].WaitInSync(t)
	}
	for i := range s.primaries {
		for _, p := range []*procs.Proc{s.primaries[i], s.replicas[i].Proc} {
			n, err := p.Client.Exists(ctx, "failover").Result()
			require.NoError(t, err)
			require.Zero(t, n, "%s: key left by the unreplicated attempt", p.Name)
		}
	}

	leaseA, err := a.TryLock(ctx, "failover", time.Minute)
	require.NoError(t, err)
	s.failOver(t, 0, 1)
	// Not trusted: the guard lets the promoted replicas in at once, since
	// every grant waited for the one replica each primary had.
	b := untrustingLocker(t, s.clients(t), opts)
	require.NoError(t, b.Warm(ctx))
	// Nodes 0 and 1 have no replica now: their WAIT runs its whole timeout
	// (half the NodeTimeout) before the pipeline brings their answer back,
	// even though the answer is contention.
	_, err = b.TryLock(ctx, "failover", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "B after the failover of two replicated nodes")
	require.NoError(t, leaseA.Check(ctx), "A's lease on the promoted replicas")
	// The promoted primaries have no replica yet: an extension cannot be
	// replicated there, so it fails (and the lease keeps its validity).
	require.ErrorIs(t, leaseA.Extend(ctx, time.Minute), redlock.ErrNotReplicated)
	bin := procs.Binary(t, harness.SuiteServer(), "server")
	for _, i := range []int{0, 1} {
		procs.ReplicaOf(t, fmt.Sprintf("node %d new replica", i), bin, s.replicas[i].Proc, "--save", "", "--appendonly", "no")
	}
	require.NoError(t, leaseA.Extend(ctx, time.Minute), "A extends through its failover clients once the new primaries have replicas")
	require.NoError(t, leaseA.Unlock(ctx))
}

// WAITAOF (Options.WaitAOF) on three primaries with one replica each, all
// with AOF and appendfsync always. On Redis 8.0 and Valkey 8.1: acquire,
// extend and fencing succeed once the fsyncs are acknowledged; with two
// replicas' replication cut the acquisition fails with ErrNotReplicated; on
// primaries with appendonly no it fails with an error that says so. On Redis
// 7.0, which has no WAITAOF, it fails with an error that says that. Neither
// is contention, and no key is left.
func TestWaitAOF(t *testing.T) {
	ctx := t.Context()
	server := harness.SuiteServer()
	bin := procs.Binary(t, server, "server")
	aof := []string{"--appendonly", "yes", "--appendfsync", "always", "--save", ""}
	var primaries []*procs.Proc
	var replicas []*procs.Replica
	var nodes []redlock.Node
	for i := range 3 {
		port, err := procs.FreePort()
		require.NoError(t, err)
		p := procs.Start(t, fmt.Sprintf("node %d primary", i), bin, port, aof...)
		primaries = append(primaries, p)
		r := procs.ReplicaOf(t, fmt.Sprintf("node %d replica", i), bin, p, aof...)
		r.WaitAOFReady(t)
		replicas = append(replicas, r)
		c := redis.NewClient(&redis.Options{Addr: p.Addr})
		t.Cleanup(func() { c.Close() })
		nodes = append(nodes, c)
	}
	// A replica reports its fsyncs with its once-a-second acknowledgement:
	// WAITAOF 1 1 answers after up to a second (measured on Redis 8.0.2 and
	// Valkey 8.1.1), so the WAITAOF timeout, half the NodeTimeout, is 1.5 s.
	l := newLockerOn(t, nodes, &redlock.Options{WaitReplicas: 1, WaitAOF: true, Fencing: true, NodeTimeout: 3 * time.Second})
	// Wait until each primary's WAITAOF is answered in full, as an operator
	// would check a new replica before counting on it.
	acked := func(p *procs.Proc) {
		t.Helper()
		procs.WaitFor(t, 20*time.Second, p.Name+": WAITAOF 1 1 acknowledged", func() (bool, error) {
			if err := p.Client.Set(ctx, "warm", "1", 0).Err(); err != nil {
				return false, err
			}
			r, err := p.Client.Do(ctx, "WAITAOF", 1, 1, 1500).Int64Slice()
			return err == nil && len(r) == 2 && r[0] == 1 && r[1] == 1, err
		})
	}
	if server != "redis:7.0" {
		for _, p := range primaries {
			acked(p)
		}
	}
	noKey := func(why string) {
		t.Helper()
		drain(t, l)
		for _, p := range primaries {
			n, err := p.Client.Exists(ctx, "aof").Result()
			require.NoError(t, err)
			require.Zero(t, n, "%s: key left (%s)", p.Name, why)
		}
	}
	refused := func(says string, is error) {
		t.Helper()
		_, err := l.TryLock(ctx, "aof", time.Minute)
		require.Error(t, err)
		require.NotErrorIs(t, err, redlock.ErrNotObtained)
		require.Contains(t, err.Error(), says)
		if is != nil {
			require.ErrorIs(t, err, is)
		}
		noKey(says)
	}
	if server == "redis:7.0" {
		refused("no WAITAOF", nil)
		return
	}

	lease, err := l.TryLock(ctx, "aof", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lease.Extend(ctx, time.Minute))
	require.NoError(t, lease.Unlock(ctx))

	for _, r := range replicas[:2] {
		r.CutReplication()
	}
	refused("0 of 1 replicas' fsyncs within 1.5s", redlock.ErrNotReplicated)
	for _, r := range replicas[:2] {
		r.RestoreReplication()
		r.WaitInSync(t)
		r.WaitAOFReady(t)
	}
	for _, p := range primaries {
		acked(p)
	}

	for _, p := range primaries {
		require.NoError(t, p.Client.ConfigSet(ctx, "appendonly", "no").Err())
	}
	refused("appendonly no", nil)
}
