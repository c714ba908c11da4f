package redlock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock"
)

// migrationPaths are the direct transport's two ways to a node (every
// Redis Cluster node takes the direct transport), the second also after
// the nodes lost their scripts (NOSCRIPT, then EVAL of the single-key
// form): lone, each client behind a hookNode, so that commands go alone and
// the guard's companions apart (nodes that cannot pipeline); paired, the
// clients themselves, whose commands go with the companions (sendPaired, a
// Redis Cluster node's path).
var migrationPaths = []struct {
	name        string
	lone, flush bool
}{
	{"lone", true, false},
	{"paired", false, false},
	{"paired, scripts flushed", false, true},
}

// migratingCluster is three in-process nodes whose slot migrates while
// migrating is set (redistest.MigratingSlot on each client: TRYAGAIN where
// Redis gives it), and a Locker on them, on the path lone says (see
// migrationPaths).
func migratingCluster(t *testing.T, lone bool) (c *cluster, l *redlock.Locker, migrating *atomic.Bool, slots []*redistest.MigratingSlot) {
	t.Helper()
	c = newCluster(t, 3)
	migrating = new(atomic.Bool)
	nodes := c.nodes(func(i int, n redlock.Node) redlock.Node {
		slot := &redistest.MigratingSlot{Server: c.servers[i], Migrating: migrating}
		slots = append(slots, slot)
		n.(*redis.Client).AddHook(slot)
		if lone {
			return &hookNode{Node: n}
		}
		return n
	})
	return c, newLocker(t, nodes, &redlock.Options{NoAutoPipeline: true}), migrating, slots
}

// migrate begins the migration, and flushes the nodes' scripts if asked.
func migrate(t *testing.T, c *cluster, migrating *atomic.Bool, flush bool) {
	t.Helper()
	migrating.Store(true)
	if flush {
		for _, m := range c.servers {
			require.NoError(t, newClient(t, m.Addr()).ScriptFlush(t.Context()).Err())
		}
	}
}

// A held lease is checked and extended while its slot migrates: the check
// and extend scripts name the lease's key and its revocation tombstone,
// which a migrating slot refuses with TRYAGAIN whenever the node holds the
// key alone (always, but after a Revoke), so they go again in their
// single-key form. That form never heals a missing key (it cannot see a
// tombstone): healing waits until the slot has settled.
func TestHeldLeaseThroughASlotMigration(t *testing.T) {
	for _, path := range migrationPaths {
		t.Run(path.name, func(t *testing.T) {
			c, l, migrating, slots := migratingCluster(t, path.lone)
			ctx := t.Context()
			const key = "migrating"
			lease, err := l.TryLock(ctx, key, time.Minute)
			require.NoError(t, err)
			value := lease.Value()

			migrate(t, c, migrating, path.flush)
			require.NoError(t, lease.Check(ctx), "a held lease while its slot migrates")
			require.NoError(t, lease.Extend(ctx, time.Minute), "an extension while the slot migrates")
			drain(t, l) // the nodes a decision did not wait for
			for i, slot := range slots {
				require.GreaterOrEqual(t, slot.SingleKey.Load(), int64(2), "node %d: the check and the extension went again naming the key alone", i)
			}

			// Node 0 forgets the lease (a restart) mid-migration: the
			// extension still wins on the other two, and does not set the
			// key again there.
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
		})
	}
}

// A lease's Unlock while its slot migrates: the release names the key and
// its line of waiting Lockers, which a migrating slot refuses with
// TRYAGAIN where the node holds the key alone, so it goes again naming the
// key alone (releaseWithoutLine): the key is deleted everywhere all the
// same.
func TestUnlockThroughASlotMigration(t *testing.T) {
	for _, path := range migrationPaths {
		t.Run(path.name, func(t *testing.T) {
			c, l, migrating, slots := migratingCluster(t, path.lone)
			ctx := t.Context()
			lease, err := l.TryLock(ctx, "migrating", time.Minute)
			require.NoError(t, err)
			migrate(t, c, migrating, path.flush)
			require.NoError(t, lease.Unlock(ctx), "an Unlock while the slot migrates")
			drain(t, l)
			require.Empty(t, c.holdingAny("migrating"))
			for i, slot := range slots {
				require.Positive(t, slot.SingleKey.Load(), "node %d: the release went again naming the key alone", i)
			}
		})
	}
}

// A lease revoked before its slot began to migrate is not healed back
// mid-migration: its single-key extension finds the key missing and cannot
// see the tombstone, so it sets nothing (none asks to heal), and the lease
// is lost. A revocation mid-migration itself fails on the nodes (it must
// name the tombstone, which the slot refuses): the known limit.
func TestRevokedLeaseIsNotHealedMidMigration(t *testing.T) {
	for _, path := range migrationPaths {
		t.Run(path.name, func(t *testing.T) {
			c, l, migrating, slots := migratingCluster(t, path.lone)
			ctx := t.Context()
			const key = "revoked-mid-migration"
			lease, err := l.TryLock(ctx, key, time.Minute)
			require.NoError(t, err)
			// Every node's SET has run before the revocation: a grant still
			// on its way to a node (the decision did not wait for it, and
			// the direct transport sends the revocation on another
			// connection) could land after the revocation there (see
			// Revoke).
			drain(t, l)
			migrating.Store(true)
			_, err = l.Revoke(ctx, key)
			require.ErrorContains(t, err, "TRYAGAIN", "a revocation mid-migration names the tombstone, which the slot refuses")
			migrating.Store(false)
			_, err = l.Revoke(ctx, key)
			require.NoError(t, err)
			drain(t, l)
			for i, m := range c.servers {
				require.False(t, m.Exists(key), "node %d: the revocation deleted the key", i)
			}

			migrate(t, c, migrating, path.flush)
			err = lease.Extend(ctx, time.Minute)
			require.ErrorIs(t, err, redlock.ErrNotHeld)
			drain(t, l)
			for i, m := range c.servers {
				require.False(t, m.Exists(key), "node %d: the revoked key was set again", i)
			}
			for i, slot := range slots {
				require.Zero(t, slot.Heals.Load(), "node %d: a single-key extension asked to heal", i)
			}
			migrating.Store(false)
			err = lease.Extend(ctx, time.Minute)
			t.Logf("the lost lease's next extension: %v", err)
			require.Error(t, err)
			for i, m := range c.servers {
				require.False(t, m.Exists(key), "node %d: the revoked key was set again after the migration", i)
			}
			drain(t, l)
		})
	}
}
