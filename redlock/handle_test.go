package redlock_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
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

	short, err := l.TryLock(t.Context(), "b", 100*time.Millisecond)
	require.NoError(t, err)
	h = short.Handle()
	for _, m := range c.servers {
		m.FastForward(200 * time.Millisecond)
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
// background and releases it at the end.
func TestResumedLeaseRunsUnderDo(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), nil)
	lease, err := l.TryLockMulti(t.Context(), []string{"x", "y"}, 300*time.Millisecond)
	require.NoError(t, err)
	worker := otherLocker(t, c, nil)
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
	isExtension := func(args []any) bool { return len(args) == 3 && (args[2] == "1" || args[2] == "0") } // value, ms, heal
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
