package redlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// tryAgainError is the error a Redis Cluster node gives a command naming
// several keys of a slot that is migrating when it holds only some of them.
type tryAgainError struct{}

func (tryAgainError) Error() string {
	return "TRYAGAIN Multiple keys request during rehashing of slot"
}
func (tryAgainError) RedisError() {}

// migratingNodes wraps the cluster's nodes so that, while migrating is set,
// every script naming more than one key is refused as a migrating slot
// refuses it (TRYAGAIN), as a real cluster does (see
// test/integration/migration_test.go: TestClusterSlotMigration).
func migratingNodes(c *cluster, migrating *atomic.Bool) ([]redlock.Node, []*hookNode) {
	hooks := make([]*hookNode, len(c.clients))
	nodes := c.nodes(func(i int, n redlock.Node) redlock.Node {
		hooks[i] = &hookNode{Node: n, beforeScript: func(_ context.Context, keys []string, _ []any) error {
			if migrating.Load() && len(keys) > 1 {
				return tryAgainError{}
			}
			return nil
		}}
		return hooks[i]
	})
	return nodes, hooks
}

// A held lease is checked and extended while its slot migrates: the check
// and extend scripts name the lease's key and its revocation tombstone,
// which a migrating slot refuses with TRYAGAIN whenever the node holds the
// key alone (always, but after a Revoke), so they go again in their
// single-key form. That form never heals a missing key (it cannot see a
// tombstone): healing waits until the slot has settled.
func TestHeldLeaseThroughASlotMigration(t *testing.T) {
	c := newCluster(t, 3)
	var migrating atomic.Bool
	nodes, hooks := migratingNodes(c, &migrating)
	l := newLocker(t, nodes, nil)
	ctx := t.Context()
	const key = "migrating"
	lease, err := l.TryLock(ctx, key, time.Minute)
	require.NoError(t, err)
	value := valueOf(t, hooks[0])

	migrating.Store(true)
	require.NoError(t, lease.Check(ctx), "a held lease while its slot migrates")
	require.NoError(t, lease.Extend(ctx, time.Minute), "an extension while the slot migrates")
	drain(t, l) // the nodes a decision did not wait for
	for i, h := range hooks {
		var narrow int
		h.mu.Lock()
		for _, keys := range h.scriptKeys {
			if len(keys) == 1 && keys[0] == key {
				narrow++
			}
		}
		h.mu.Unlock()
		// (each at least once: EVALSHA, and EVAL where NOSCRIPT came first)
		require.GreaterOrEqual(t, narrow, 2, "node %d: the check and the extension went again naming the key alone", i)
	}

	// Node 0 forgets the lease (a restart) mid-migration: the extension
	// still wins on the other two, and does not set the key again there.
	c.servers[0].Del(key)
	require.NoError(t, lease.Extend(ctx, time.Minute))
	drain(t, l)
	require.Equal(t, []int{1, 2}, c.holding(key, value), "no healing while the slot migrates")

	migrating.Store(false)
	require.NoError(t, lease.Extend(ctx, time.Minute))
	drain(t, l)
	require.Equal(t, []int{0, 1, 2}, c.holding(key, value), "healed once the slot settled")
	require.NoError(t, lease.Unlock(ctx))
	drain(t, l)
}

// A lease revoked while its slot migrates is not healed back: its single-key
// extension finds the key missing and cannot see the tombstone, so it sets
// nothing, and the lease is lost.
func TestRevokedLeaseIsNotHealedMidMigration(t *testing.T) {
	c := newCluster(t, 3)
	var migrating atomic.Bool
	nodes, _ := migratingNodes(c, &migrating)
	l := newLocker(t, nodes, nil)
	ctx := t.Context()
	const key = "revoked-mid-migration"
	lease, err := l.TryLock(ctx, key, time.Minute)
	require.NoError(t, err)
	_, err = l.Revoke(ctx, key)
	require.NoError(t, err)

	migrating.Store(true)
	err = lease.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	drain(t, l)
	for i, m := range c.servers {
		require.False(t, m.Exists(key), "node %d: the revoked key was set again", i)
	}
	migrating.Store(false)
	err = lease.Extend(ctx, time.Minute)
	t.Logf("the lost lease's next extension: %v", err)
	require.Error(t, err)
	for i, m := range c.servers {
		require.False(t, m.Exists(key), "node %d: the revoked key was set again after the migration", i)
	}
	drain(t, l)
}
