package redlock_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// A handle that names only some of a multi-key lease's keys describes a
// lease that was never granted: Resume must refuse it. Accepted, the
// resumed lease's Unlock releases those keys alone and leaves the others
// held on every node (a partial lease) until they expire.
func TestResumeRefusesAHandleOfSomeOfTheKeys(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "fenced"}[fencing], func(t *testing.T) {
			c := newCluster(t, 3)
			l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: fencing})
			lease, err := l.TryLockMulti(t.Context(), []string{"a", "b"}, time.Minute)
			require.NoError(t, err)
			part := lease.Handle()
			part.Keys = []string{"a"}
			if fencing {
				part.Tokens = []uint64{lease.TokenOf("a")}
			}
			worker := otherLocker(t, c, &redlock.Options{Fencing: fencing})
			resumed, err := worker.Resume(t.Context(), part)
			if err == nil {
				require.NoError(t, resumed.Unlock(t.Context()))
				drain(t, worker)
				assert.Empty(t, c.holding("a", lease.Value()))
				t.Errorf("Resume accepted a handle of key a alone of the lease {a, b}; after its Unlock, nodes %v still hold b", c.holding("b", lease.Value()))
				return
			}
			require.ErrorIs(t, err, redlock.ErrNotHeld)
		})
	}
}

// A fencing token that was never issued must not be resumed (the
// contract TestResumeRefusesStaleForgedAndForeignHandles states: "a token
// never issued" fails with ErrNotHeld). Resume only refuses a token above
// the largest counter among the holding nodes, so it accepts 0, a token
// below the real one (which an earlier lease may hold: a duplicate), and a
// token above the real one where a node that
// granted after the decision has a counter ahead: that one then outranks
// the token of a later acquisition of the key, which breaks Order for a
// resource guarded by the key's tokens.
func TestResumeRefusesTokensNeverIssued(t *testing.T) {
	c := newCluster(t, 3)
	for i, n := range []string{"5", "5", "100"} {
		require.NoError(t, c.servers[i].Set("{k}:fencing", n))
	}
	gate := make(chan struct{})
	var slow hookNode // node 2: its acquisitions wait at the gate, and fail once refuse is set
	var refuse atomic.Bool
	slow.beforeScript = func(ctx context.Context, keys []string, args []any) error {
		if len(args) == 2 && keys[0] == "k" { // phase 1: value, PX
			if _, ms := args[1].(int64); ms {
				if refuse.Load() {
					return errInjected
				}
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	}
	l := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
		if i == 2 {
			slow.Node = n
			return &slow
		}
		return n
	}), &redlock.Options{Fencing: true})
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	real := lease.Token()
	require.Equal(t, uint64(6), real>>8, "decided by nodes 0 and 1")
	close(gate)
	drain(t, l) // node 2 grants too: its counter is now 101
	require.Equal(t, []int{0, 1, 2}, c.holding("k", lease.Value()))
	// Node 0 forgets the key (the lease still holds on nodes 1 and 2), so
	// that node 2's answer is among those Resume decides on.
	c.servers[0].Del("k")

	for _, tc := range []struct {
		name  string
		token uint64
	}{
		{"zero", 0},
		{"lower (t=5: an earlier lease's token, so a duplicate)", real - 1<<8},
		{"higher, from the node ahead", 101<<8 | 2}, // node 2 is a hookNode: its label ranks after the addresses
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := lease.Handle()
			h.Tokens = []uint64{tc.token}
			resumed, err := l.Resume(t.Context(), h)
			if err == nil {
				t.Errorf("Resume accepted token %d (t=%d), never issued; the lease's is %d (t=%d)", resumed.Token(), resumed.Token()>>8, real, real>>8)
				return
			}
			require.ErrorIs(t, err, redlock.ErrNotHeld)
		})
	}

	// Order: the key's next acquisition, while node 2 fails, gets t=7,
	// below the forged 101 that the resumed holder used.
	require.NoError(t, lease.Unlock(t.Context()))
	refuse.Store(true)
	next, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	t.Logf("the next acquisition's token: t=%d (the forged one resumed: t=101)", next.Token()>>8)
	require.NoError(t, next.Unlock(t.Context()))
}

// The validity of a resumed multi-key lease is the least any of its keys
// has left on each node, then the majority's: with one key short on two
// nodes of three, a different key on each, the lease holds at most that
// short time.
func TestResumedMultiKeyValidityIsTheLeastKeyOnTheMajority(t *testing.T) {
	for _, tc := range []struct {
		name  string
		short map[int]string // node -> the key whose TTL is short there
	}{
		{"same key", map[int]string{0: "b", 1: "b"}},
		{"a key each", map[int]string{0: "a", 2: "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			l := newLocker(t, c.nodes(nil), nil)
			lease, err := l.TryLockMulti(t.Context(), []string{"a", "b"}, time.Minute)
			require.NoError(t, err)
			drain(t, l)
			for i, k := range tc.short {
				c.servers[i].SetTTL(k, 5*time.Second)
			}
			resumed, err := otherLocker(t, c, nil).Resume(t.Context(), lease.Handle())
			require.NoError(t, err)
			assert.LessOrEqual(t, resumed.Validity(), 5*time.Second)
			assert.Greater(t, resumed.Validity(), 4*time.Second)
		})
	}
}

// A handle resumed on a Locker whose servers are the same but listed in
// another order is accepted (bound to the sorted addresses); one naming a
// superset of the lease's keys, or another value's keys, is refused.
func TestResumeBindsToTheServersAndTheWholeKeySet(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	lease, err := l.TryLockMulti(t.Context(), []string{"a", "b"}, time.Minute)
	require.NoError(t, err)
	other, err := l.TryLock(t.Context(), "c", time.Minute)
	require.NoError(t, err)

	reversed := newLocker(t, []redlock.Node{newClient(t, c.servers[2].Addr()), newClient(t, c.servers[0].Addr()), newClient(t, c.servers[1].Addr())}, &redlock.Options{Fencing: true})
	resumed, err := reversed.Resume(t.Context(), lease.Handle())
	require.NoError(t, err, "same servers, another order")
	assert.Equal(t, lease.Token(), resumed.Token())

	more := lease.Handle()
	more.Keys = []string{"a", "b", "c"}
	more.Tokens = append(more.Tokens, other.Token())
	_, err = reversed.Resume(t.Context(), more)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "a superset")

	swapped := lease.Handle()
	swapped.Value = other.Value()
	_, err = reversed.Resume(t.Context(), swapped)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "another lease's value")
	require.NoError(t, lease.Check(t.Context()))
	require.NoError(t, other.Check(t.Context()))
}

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
