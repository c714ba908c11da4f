package redlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// A revoked holder stays revoked when the key is acquired and revoked
// again before the holder's next extension: the second tombstone must not
// erase the first, or the first holder's extension heals the key back on
// every node and it holds the lease again, unaware it was ever revoked.
func TestRevokedLeaseStaysRevokedAfterTheNextHolderIsRevoked(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	first := newLocker(t, c.nodes(nil), &redlock.Options{Owner: "app-1"})
	second := newLocker(t, c.nodes(nil), &redlock.Options{Owner: "app-2"})
	ops := newLocker(t, c.nodes(nil), &redlock.Options{Owner: "ops"})

	revoked, err := first.TryLock(ctx, "k", time.Minute)
	require.NoError(t, err)
	drain(t, first)
	_, err = ops.Revoke(ctx, "k")
	require.NoError(t, err)

	next, err := second.TryLock(ctx, "k", time.Minute)
	require.NoError(t, err, "the key is free once revoked")
	drain(t, second)
	_, err = ops.Revoke(ctx, "k")
	require.NoError(t, err)

	err = revoked.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "the first holder was revoked; its extension must not heal the key back")
	require.Empty(t, c.holding("k", revoked.Value()), "no node holds the revoked value again")
	require.ErrorIs(t, next.Extend(ctx, time.Minute), redlock.ErrNotHeld)
}

// The same for a multi-key lease: a key's second revocation keeps the
// first holder's tombstone.
func TestRevokedMultiKeyLeaseStaysRevokedAfterTheNextHolderIsRevoked(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	first := newLocker(t, c.nodes(nil), &redlock.Options{Owner: "app-1"})
	second := newLocker(t, c.nodes(nil), &redlock.Options{Owner: "app-2"})
	ops := newLocker(t, c.nodes(nil), &redlock.Options{Owner: "ops"})

	revoked, err := first.TryLockMulti(ctx, []string{"a", "b"}, time.Minute)
	require.NoError(t, err)
	drain(t, first)
	_, err = ops.Revoke(ctx, "a")
	require.NoError(t, err)
	next, err := second.TryLock(ctx, "a", time.Minute)
	require.NoError(t, err)
	drain(t, second)
	_, err = ops.Revoke(ctx, "a")
	require.NoError(t, err)

	require.ErrorIs(t, revoked.Extend(ctx, time.Minute), redlock.ErrNotHeld)
	require.Empty(t, c.holding("a", revoked.Value()))
	require.ErrorIs(t, revoked.Check(ctx), redlock.ErrNotHeld)
	require.ErrorIs(t, next.Check(ctx), redlock.ErrNotHeld)
}
