package redlock_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock/redlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// otherLocker is a Locker over c's servers through clients of its own, as
// another process would have.
func otherLocker(t *testing.T, c *cluster, opts *redlock.Options) *redlock.Locker {
	var nodes []redlock.Node
	for _, m := range c.servers {
		nodes = append(nodes, newClient(t, m.Addr()))
	}
	return newLocker(t, nodes, opts)
}

// A handle crosses as JSON to a Locker with clients of its own, which
// resumes the lease (single- and multi-key, with and without fencing),
// extends, checks and releases it there; the first holder then finds it
// gone.
func TestHandleRoundTripsToAnotherLocker(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keys    []string
		fencing bool
	}{
		{"one key", []string{"job:1"}, false},
		{"one key fenced", []string{"job:1"}, true},
		{"two keys", []string{"acct:2", "acct:1"}, false},
		{"two keys fenced", []string{"acct:2", "acct:1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			runner := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: tc.fencing})
			worker := otherLocker(t, c, &redlock.Options{Fencing: tc.fencing})
			lease, err := runner.TryLockMulti(t.Context(), tc.keys, time.Minute)
			require.NoError(t, err)
			wire, err := json.Marshal(lease.Handle())
			require.NoError(t, err)
			assert.NotContains(t, string(wire), "until", "no deadline crosses")
			var h redlock.Handle
			require.NoError(t, json.Unmarshal(wire, &h))

			resumed, err := worker.Resume(t.Context(), h)
			require.NoError(t, err)
			assert.Equal(t, lease.Keys(), resumed.Keys())
			assert.Equal(t, lease.Value(), resumed.Value())
			assert.Equal(t, lease.Token(), resumed.Token())
			for _, k := range lease.Keys() {
				assert.Equal(t, lease.TokenOf(k), resumed.TokenOf(k), k)
				if tc.fencing {
					assert.NotZero(t, resumed.TokenOf(k))
				}
			}
			assert.Greater(t, resumed.Validity(), 50*time.Second)
			assert.LessOrEqual(t, resumed.Validity(), lease.Validity()+time.Second)

			require.NoError(t, resumed.Extend(t.Context(), 30*time.Second))
			assert.Greater(t, resumed.Validity(), 25*time.Second)
			assert.LessOrEqual(t, resumed.Validity(), 30*time.Second)
			drain(t, worker) // every node's extension has landed
			for i, m := range c.servers {
				assert.LessOrEqual(t, m.TTL(lease.Key()), 30*time.Second, "node %d", i)
			}
			require.NoError(t, resumed.Check(t.Context()))
			require.NoError(t, resumed.Unlock(t.Context()))
			drain(t, worker)
			for i, m := range c.servers {
				assert.Empty(t, keysLeft(m), "node %d", i)
			}
			require.ErrorIs(t, lease.Check(t.Context()), redlock.ErrNotHeld)
		})
	}
}

// keysLeft is the keys on a node but those the library keeps for good:
// the node guard's marker, fencing counters and token records.
func keysLeft(m interface{ Keys() []string }) []string {
	var keys []string
	for _, k := range m.Keys() {
		if k != "redlock:memory" && !strings.HasSuffix(k, ":fencing") && !strings.Contains(k, ":fencing-token") {
			keys = append(keys, k)
		}
	}
	return keys
}

// The validity of a resumed lease is the nodes' word: the least time left
// on a majority of the nodes heard (a majority of {10s, 30s, 20s} holds it
// 20s at most; any two of {20s, 20s, 40s} 20s), less the drift allowance,
// and never more.
func TestResumedValidityIsTheMajoritysTimeLeft(t *testing.T) {
	for _, tc := range []struct {
		left    [3]time.Duration
		most    time.Duration
		atLeast time.Duration
	}{
		{[3]time.Duration{10 * time.Second, 30 * time.Second, 20 * time.Second}, 20 * time.Second, 9 * time.Second},
		{[3]time.Duration{20 * time.Second, 20 * time.Second, 40 * time.Second}, 20 * time.Second, 19 * time.Second},
	} {
		c := newCluster(t, 3)
		l := newLocker(t, c.nodes(nil), nil)
		lease, err := l.TryLock(t.Context(), "k", time.Minute)
		require.NoError(t, err)
		drain(t, l) // every node's SET has landed
		for i, left := range tc.left {
			c.servers[i].SetTTL("k", left)
		}
		resumed, err := otherLocker(t, c, nil).Resume(t.Context(), lease.Handle())
		require.NoError(t, err)
		assert.LessOrEqual(t, resumed.Validity(), tc.most, "%v", tc.left)
		assert.Greater(t, resumed.Validity(), tc.atLeast, "%v", tc.left)
	}
}

// A stale handle (released, run out, revoked) or a forged one (a value or a
// token never issued) fails with ErrNotHeld; one from other servers with
// ErrOtherNodes; a malformed one with an error naming what is wrong.
func TestResumeRefusesStaleForgedAndForeignHandles(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	other := otherLocker(t, c, &redlock.Options{Fencing: true})

	released, err := l.TryLock(t.Context(), "a", time.Minute)
	require.NoError(t, err)
	h := released.Handle()
	require.NoError(t, released.Unlock(t.Context()))
	_, err = other.Resume(t.Context(), h)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "released")

	// Run out on the servers' clocks alone (FastForward): a lease of 100 ms
	// on the wall clock was spent before its acquisition was answered on a
	// loaded machine.
	short, err := l.TryLock(t.Context(), "b", 2*time.Second)
	require.NoError(t, err)
	h = short.Handle()
	for _, m := range c.servers {
		m.FastForward(3 * time.Second)
	}
	_, err = other.Resume(t.Context(), h)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "run out")

	revoked, err := l.TryLock(t.Context(), "c", time.Minute)
	require.NoError(t, err)
	_, err = l.Revoke(t.Context(), "c")
	require.NoError(t, err)
	_, err = other.Resume(t.Context(), revoked.Handle())
	require.ErrorIs(t, err, redlock.ErrNotHeld, "revoked")

	held, err := l.TryLock(t.Context(), "d", time.Minute)
	require.NoError(t, err)
	forged := held.Handle()
	forged.Value = "forged-value"
	_, err = other.Resume(t.Context(), forged)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "forged value")
	forged = held.Handle()
	forged.Tokens = []uint64{held.Token() + 1<<8}
	_, err = other.Resume(t.Context(), forged)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "altered token")
	require.ErrorContains(t, err, "seal")
	_, err = other.Resume(t.Context(), redlock.Reseal(forged))
	require.ErrorIs(t, err, redlock.ErrNotHeld, "forged token, sealed anew")
	require.ErrorContains(t, err, "never issued")

	// A handle of some of a multi-key lease's keys would release those
	// alone: its seal does not match.
	pair, err := l.TryLockMulti(t.Context(), []string{"e", "f"}, time.Minute)
	require.NoError(t, err)
	part := pair.Handle()
	part.Keys, part.Tokens = part.Keys[:1], part.Tokens[:1]
	_, err = other.Resume(t.Context(), part)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "some of the keys")

	two := newCluster(t, 3)
	elsewhere := newLocker(t, two.nodes(nil), &redlock.Options{Fencing: true})
	_, err = elsewhere.Resume(t.Context(), held.Handle())
	require.ErrorIs(t, err, redlock.ErrOtherNodes)

	for _, tc := range []struct {
		edit func(*redlock.Handle)
		want string
	}{
		{func(h *redlock.Handle) { h.Keys = nil }, "no keys"},
		{func(h *redlock.Handle) { h.Value = "" }, "no value"},
		{func(h *redlock.Handle) { h.Keys = []string{"d", "a"}; h.Tokens = nil }, "sorted and distinct"},
		{func(h *redlock.Handle) { h.Tokens = []uint64{1, 2} }, "2 tokens for 1 keys"},
		{func(h *redlock.Handle) { h.Keys = []string{"{d}:fencing"} }, "reserved"},
	} {
		bad := held.Handle()
		tc.edit(&bad)
		_, err := other.Resume(t.Context(), bad)
		require.ErrorContains(t, err, tc.want)
		require.NotErrorIs(t, err, redlock.ErrNotHeld)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	_, err = other.Resume(nil, held.Handle()) //nolint:staticcheck
	require.ErrorContains(t, err, "nil context")
	require.NoError(t, held.Check(t.Context()), "refused resumptions leave the lease as it was")
}

// A resumed lease runs under Do, which extends it past its TTL in the
// background and releases it at the end. In virtual time: on the wall
// clock a loaded machine lost the 300 ms lease's extensions now and then.
func TestResumedLeaseRunsUnderDo(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		c := newVirtualCluster(t, 3)
		opts := &redlock.Options{NodeTimeout: time.Second}
		l := newLocker(t, c.nodes(nil), opts)
		lease, err := l.TryLockMulti(t.Context(), []string{"x", "y"}, 300*time.Millisecond)
		require.NoError(t, err)
		worker := newLocker(t, c.nodes(nil), opts) // another Locker over the same servers
		resumed, err := worker.Resume(t.Context(), lease.Handle())
		require.NoError(t, err)
		err = resumed.Do(t.Context(), 300*time.Millisecond, func(ctx context.Context, held *redlock.Lease) error {
			select {
			case <-time.After(time.Second): // past three TTLs: Do extended it
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			return held.Check(ctx)
		})
		require.NoError(t, err)
		drain(t, worker)
		for i, m := range c.servers {
			assert.Empty(t, lockKeys(m), "node %d", i)
		}
		err = resumed.Do(t.Context(), time.Second, func(context.Context, *redlock.Lease) error { return nil })
		require.ErrorIs(t, err, redlock.ErrNotHeld, "an unlocked lease does not run again")
	})
}

// A lease handed over within one Locker (Lease.Handle, then Resume) and
// unlocked by the resumed copy while a command of the original that may set
// the key (its acquisition's SET, or an extension, which heals a missing
// key) is still on its way to a node without a pipeline: the release there
// must not overtake it. Were the release sent at once, it could reach the
// node first, and the late command would set the key again, for its TTL,
// with no one holding it.
//
// Node 2 (always the direct transport) holds that command back until a
// release has been answered there, then sends it: late, after the release.
// With the Locker's wait in place (every release of a value, on a node
// without a pipeline, waits for this Locker's calls that may set that value
// there) the release cannot come first: the held command's call ends unsent
// at its own deadline, and the release follows it. Without the wait (the
// resumed copy's Unlock ordered only after its own rounds) the release is
// answered first and the command sets the key again.
func TestLateSetsOfAHandedOverLeaseDoNotOutliveTheResumedUnlock(t *testing.T) {
	isSET := func(args []any) bool { s, _ := args[0].(string); return s == "SET" }
	isRelease := func(args []any) bool { return len(args) >= 2 && args[1] == "notify" }
	for _, tc := range []struct {
		name string
		late func(args []any) bool // the command held back on node 2 (once)
		// take returns a lease whose late command is held on node 2
		take func(ctx context.Context, l *redlock.Locker, late *atomic.Bool) (*redlock.Lease, error)
	}{
		{"acquisition", isSET, func(ctx context.Context, l *redlock.Locker, late *atomic.Bool) (*redlock.Lease, error) {
			late.Store(true)
			return l.TryLock(ctx, "k", 10*time.Second)
		}},
		{"healing extension", isExtension, func(ctx context.Context, l *redlock.Locker, late *atomic.Bool) (*redlock.Lease, error) {
			lease, err := l.TryLock(ctx, "k", 10*time.Second)
			if err != nil {
				return nil, err
			}
			if err := l.Drain(ctx); err != nil { // node 2's SET has landed
				return nil, err
			}
			late.Store(true)
			return lease, lease.Extend(ctx, 10*time.Second) // nodes 0 and 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			var late atomic.Bool
			held := make(chan struct{})     // the late command is held
			released := make(chan struct{}) // a release was answered on node 2
			var once sync.Once
			var sentLate atomic.Bool
			hold := func(ctx context.Context, args []any) error {
				if !tc.late(args) || !late.CompareAndSwap(true, false) {
					return nil
				}
				close(held)
				select {
				case <-released:
					sentLate.Store(true)
					return nil
				case <-ctx.Done(): // its call's deadline: it gives up unsent
					return ctx.Err()
				}
			}
			slow := &hookNode{
				beforeDo:     hold,
				beforeScript: func(ctx context.Context, _ []string, args []any) error { return hold(ctx, args) },
				afterScript: func(_ []string, args []any) error {
					if isRelease(args) {
						once.Do(func() { close(released) })
					}
					return nil
				},
			}
			// NodeTimeout bounds the held command's call: with the wait in
			// place, the test waits that long for a release that never
			// comes first.
			l := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
				if i == 2 {
					slow.Node = n
					return slow
				}
				return n
			}), &redlock.Options{NodeTimeout: 2 * time.Second})
			ctx := t.Context()
			lease, err := tc.take(ctx, l, &late)
			require.NoError(t, err)
			<-held

			resumed, err := l.Resume(ctx, lease.Handle())
			require.NoError(t, err)
			require.NoError(t, resumed.Unlock(ctx))
			drain(t, l) // the held command and every release have returned
			assert.Empty(t, c.holding("k", lease.Value()), "a command of the handed-over lease set the key again after the resumed copy's release (sent late: %v)", sentLate.Load())
		})
	}
}

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
		if !isFencedAcquisition(args) || keys[0] != "k" {
			return nil
		}
		if refuse.Load() {
			return errInjected
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
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

// A fenced one-key lease whose token is 0 (an operator left the key's
// counter at -1, so INCR gave 0, on a node whose label is 0) hands over as
// unfenced: Resume refuses a token of 0 (never issued), so the handle
// carries none, and the resumed lease reports 0 as the first did.
func TestHandleOfALeaseWithTokenZeroResumes(t *testing.T) {
	c := newCluster(t, 1)
	require.NoError(t, c.servers[0].Set("{k}:fencing", "-1"))
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	require.Zero(t, lease.Token())
	h := lease.Handle()
	assert.Nil(t, h.Tokens, "the handle of a lease whose token is 0")
	resumed, err := l.Resume(t.Context(), h)
	require.NoError(t, err)
	assert.Zero(t, resumed.Token())
	require.NoError(t, resumed.Unlock(t.Context()))
}
