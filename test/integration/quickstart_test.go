package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/redlock/redlock/test/integration/procs"
)

// The README's quick start, as a newcomer pastes it, against three
// redis-server processes started for it: the first lock is granted at
// once. Without TrustNewNodes the same program is refused, and the error
// says what to run. A program that starts later, once the deployment is
// in use, trusts nothing: a node that forgot (FLUSHALL) beside nodes that
// remember stays quarantined, where TrustNodes (the negative control)
// would have let it vote while a lease it granted is held.
func TestQuickStartLocksOnNewServers(t *testing.T) {
	ctx := t.Context()
	bin := procs.Binary(t, harness.SuiteServer(), "server")
	var servers []*procs.Proc
	var addrs []string
	for i := range 3 {
		port, err := procs.FreePort()
		require.NoError(t, err)
		p := procs.Start(t, fmt.Sprintf("node %d", i), bin, port, "--save", "", "--appendonly", "no")
		servers, addrs = append(servers, p), append(addrs, p.Addr)
	}
	quickStart := func() *redlock.Locker {
		var nodes []redlock.Node
		for _, a := range addrs {
			nodes = append(nodes, closing(t, redis.NewClient(clientOptions(a))))
		}
		return untrustingLocker(t, nodes, &redlock.Options{Fencing: true, NodeTimeout: time.Second})
	}

	untrusted := quickStart()
	require.NoError(t, untrusted.Warm(ctx))
	_, err := untrusted.TryLock(ctx, "account:alice", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "new servers, not trusted")
	require.Contains(t, err.Error(), "redlock-admin -nodes "+strings.Join(addrs, ",")+" trust -yes", "the error says what to run")
	drain(t, untrusted)

	first := quickStart()
	require.NoError(t, first.Warm(ctx))
	trusted, err := first.TrustNewNodes(ctx)
	require.NoError(t, err)
	require.True(t, trusted, "servers just started")
	began := time.Now()
	var token uint64
	require.NoError(t, first.Do(ctx, "account:alice", 10*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
		token = lease.Token()
		return nil
	}))
	require.NotZero(t, token)
	require.Less(t, time.Since(began), 5*time.Second, "the first lock waits for no quarantine")

	held, err := first.TryLock(ctx, "account:bob", time.Minute)
	require.NoError(t, err)
	drain(t, first) // every node has the lease before node 0 forgets it
	require.NoError(t, servers[0].Client.FlushAll(ctx).Err())

	for _, control := range []bool{false, true} {
		later := quickStart() // a program that starts now
		if control {
			require.NoError(t, later.TrustNodes(ctx))
		} else {
			trusted, err := later.TrustNewNodes(ctx)
			require.NoError(t, err)
			require.False(t, trusted, "the deployment is in use")
		}
		require.NoError(t, later.Warm(ctx))
		left := later.Health()[0].QuarantineLeft
		if control {
			require.Zero(t, left, "negative control: trusted by hand, node 0 votes at once")
			continue
		}
		require.Greater(t, left, 50*time.Second, "node 0 forgot a held lease: it waits out MaxTTL")
	}
	require.NoError(t, held.Unlock(ctx))
}
