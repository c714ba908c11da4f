package redlock_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// Altering a sealed handle in ways that keep it well formed (tokens
// swapped between its keys, its nodes reordered, its value's bytes moved
// into a key) fails the seal; the handle as given still resumes.
func TestResumeRefusesRearrangedHandles(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	for range 3 { // distinct tokens per key
		lease, err := l.TryLock(t.Context(), "{h}a", time.Minute)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(t.Context()))
	}
	lease, err := l.TryLockMulti(t.Context(), []string{"{h}a", "{h}b"}, time.Minute)
	require.NoError(t, err)
	h := lease.Handle()
	require.NotEqual(t, h.Tokens[0], h.Tokens[1])
	worker := otherLocker(t, c, &redlock.Options{Fencing: true})

	swapped := h
	swapped.Tokens = []uint64{h.Tokens[1], h.Tokens[0]}
	reordered := h
	reordered.Nodes = slices.Clone(h.Nodes)
	slices.Reverse(reordered.Nodes)
	for name, bad := range map[string]redlock.Handle{"tokens swapped": swapped, "nodes reordered": reordered} {
		_, err := worker.Resume(t.Context(), bad)
		require.Error(t, err, name)
	}
	_, err = worker.Resume(t.Context(), swapped)
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	resumed, err := worker.Resume(t.Context(), h)
	require.NoError(t, err)
	require.Equal(t, h.Tokens, []uint64{resumed.TokenOf("{h}a"), resumed.TokenOf("{h}b")})
	require.NoError(t, resumed.Unlock(t.Context()))
}
