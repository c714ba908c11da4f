package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/redlock/redlock/test/integration/procs"
)

// N = 1 on a Redis Cluster: one *redis.ClusterClient as the Locker's only
// node (3 masters with a replica each, plain processes on 127.0.0.1), with
// fencing and WaitReplicas 1. Lease, extend, check, Do past its TTL, and
// fencing tokens that grow; then the master of the lock's slot dies while
// the lease is held, the cluster promotes its replica (which has the key,
// as WAIT confirmed), and the same Locker's lease still checks, contention
// is still contention, and the next token is higher.
func TestClusterAsOneNode(t *testing.T) {
	ctx := t.Context()
	cluster := procs.StartCluster(t, harness.SuiteServer(), 3, 1)
	cc := cluster.Client(t)
	opts := &redlock.Options{Fencing: true, WaitReplicas: 1, NodeTimeout: 2 * time.Second}
	l := newLockerOn(t, []redlock.Node{cc}, opts)
	require.NoError(t, l.Warm(ctx))

	lease, err := l.TryLock(ctx, "cluster-lock", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lease.Extend(ctx, time.Minute))
	require.NoError(t, lease.Check(ctx))
	first := lease.Token()
	_, err = l.TryLock(ctx, "cluster-lock", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NoError(t, lease.Unlock(ctx))

	var inDo uint64
	require.NoError(t, l.Do(ctx, "cluster-lock", 600*time.Millisecond, func(ctx context.Context, lease *redlock.Lease) error {
		inDo = lease.Token()
		time.Sleep(time.Second) // past the TTL: Do's extensions keep it
		return lease.Check(ctx)
	}))
	require.Greater(t, inDo, first)

	held, err := l.TryLock(ctx, "cluster-lock", time.Minute)
	require.NoError(t, err)
	require.Greater(t, held.Token(), inDo)
	master, err := cc.MasterForKey(ctx, "cluster-lock")
	require.NoError(t, err)
	old := cluster.ByAddr(master.Options().Addr)
	require.NotNil(t, old, "the slot's master %s is not one of the cluster's nodes", master.Options().Addr)
	old.Kill()
	procs.WaitFor(t, 30*time.Second, "the cluster promotes the replica of the lock's slot", func() (bool, error) {
		cc.ReloadState(ctx)
		m, err := cc.MasterForKey(ctx, "cluster-lock")
		if err != nil || m.Options().Addr == old.Addr {
			return false, err
		}
		return m.Ping(ctx).Err() == nil, nil
	})
	require.NoError(t, held.Check(ctx), "the lease on the promoted replica")
	_, err = l.TryLock(ctx, "cluster-lock", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "contention after the failover")
	require.NoError(t, held.Unlock(ctx))

	// The promoted master has no replica: WaitReplicas 1 refuses grants
	// there (ErrNotReplicated); a Locker without it gets the next token.
	_, err = l.TryLock(ctx, "cluster-lock", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotReplicated)
	drain(t, l) // the refused attempt's release
	plain := newLockerOn(t, []redlock.Node{cc}, &redlock.Options{Fencing: true, NodeTimeout: time.Second})
	next, err := plain.TryLock(ctx, "cluster-lock", time.Minute)
	require.NoError(t, err)
	require.Greater(t, next.Token(), held.Token(), "fencing tokens grow across the failover")
	require.NoError(t, next.Unlock(ctx))
}
