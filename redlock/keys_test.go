package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/hashtag"
	"github.com/redlock/redlock/redlock"
)

// reservedNames are names the library writes on the nodes, each as a caller
// could mistype it: the node guard's marker (standalone and a Cluster slot's),
// and a lock's fencing counter, tombstone, line and release channel, plain
// and tagged.
var reservedNames = map[string]string{
	"redlock:memory": "the node guard's marker",
	"redlock:memory:{" + hashtag.TagFor(1234) + "}": "the node guard's marker",
	"{k}:fencing":          `the fencing counter of lock "k"`,
	"a{t}:fencing":         `the fencing counter of lock "a{t}"`,
	"{k}:redlock-revoked":  `the revocation tombstone of lock "k"`,
	"{k}:redlock-waiters":  `the line of Lockers waiting for lock "k"`,
	"{k}:redlock-released": `the release channel of lock "k"`,
}

// TestReservedNamesAreRefusedEverywhereAKeyIsNamed: every operation that
// takes a key refuses each name the library writes, with ErrReservedName and
// what the name is, before anything reaches a node: a Revoke of the guard's
// marker would otherwise quarantine every node of every Locker for MaxTTL,
// and a TryLock of it answer "busy" for ever.
func TestReservedNamesAreRefusedEverywhereAKeyIsNamed(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	ctx := t.Context()
	// The markers the guard wrote on first use, which a refused Revoke
	// must leave as they are.
	lease, err := l.TryLock(ctx, "warm-up", time.Second)
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(ctx))
	drain(t, l) // Unlock returns on a majority; the last node's release too
	markers := markersOf(t, c.servers)

	ops := map[string]func(ctx context.Context, key string) error{
		"TryLock": func(ctx context.Context, key string) error { _, err := l.TryLock(ctx, key, time.Second); return err },
		"Lock":    func(ctx context.Context, key string) error { _, err := l.Lock(ctx, key, time.Second); return err },
		"TryLockMulti": func(ctx context.Context, key string) error {
			_, err := l.TryLockMulti(ctx, []string{key, "other"}, time.Second)
			return err
		},
		"LockMulti": func(ctx context.Context, key string) error {
			_, err := l.LockMulti(ctx, []string{"other", key}, time.Second)
			return err
		},
		"Do": func(ctx context.Context, key string) error {
			return l.Do(ctx, key, time.Second, func(context.Context, *redlock.Lease) error { return nil })
		},
		"Inspect": func(ctx context.Context, key string) error { _, err := l.Inspect(ctx, key); return err },
		"Revoke":  func(ctx context.Context, key string) error { _, err := l.Revoke(ctx, key); return err },
		"Resume": func(ctx context.Context, key string) error {
			_, err := l.Resume(ctx, redlock.Reseal(redlock.Handle{Keys: []string{key}, Value: "v", Nodes: lease.Handle().Nodes}))
			return err
		},
	}
	for name, what := range reservedNames {
		for op, call := range ops {
			t.Run(op+"/"+name, func(t *testing.T) {
				// Bounded, should an operation wait instead of refusing.
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				err := call(ctx, name)
				require.ErrorIs(t, err, redlock.ErrReservedName)
				assert.ErrorContains(t, err, "it is "+what)
				var rn *redlock.ReservedNameError
				require.True(t, errors.As(err, &rn))
				assert.Equal(t, name, rn.Key)
			})
		}
	}
	assert.Equal(t, markers, markersOf(t, c.servers), "a refused operation changed a node's marker")
	for i, m := range c.servers {
		assert.Empty(t, keysLeft(m), "node %d: a refused operation wrote a key", i)
	}

	t.Run("names that only look alike are locks", func(t *testing.T) {
		for _, key := range []string{"redlock:memory:x", "redlock:memory:{x}", "redlock:memoryx", "k:fencing-2", "{k}:fencing:x"} {
			lease, err := l.TryLock(ctx, key, time.Second)
			require.NoError(t, err, key)
			require.NoError(t, lease.Unlock(ctx), key)
		}
	})
}

// markersOf reads each server's guard marker.
func markersOf(t *testing.T, servers []*miniredis.Miniredis) []string {
	t.Helper()
	out := make([]string, len(servers))
	for i, m := range servers {
		v, err := m.Get("redlock:memory")
		require.NoError(t, err, "node %d has no marker", i)
		out[i] = v
	}
	return out
}
