package redlock_test

// Multi-key leases at their edges: RequireDurable with multi-key fencing
// (once skipped), malformed input, keys that share a fencing counter,
// errors that name every key of the lease (once only the first), and an
// acquisition resent by the client.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// With Options.RequireDurable, a fenced acquisition refuses nodes that do
// not show they keep their counters (miniredis has no CONFIG GET): TryLock
// does, and so must a multi-key lease, whose tokens come from the same
// counters.
func TestMultiKeyFencingHonoursRequireDurable(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true, RequireDurable: true})
	_, err := l.TryLock(t.Context(), "a", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotDurable, "the single-key control")

	lease, err := l.TryLockMulti(t.Context(), []string{"a", "b"}, time.Minute)
	if err == nil {
		t.Errorf("TryLockMulti issued tokens a=%d b=%d from nodes not known to keep their counters", lease.TokenOf("a"), lease.TokenOf("b"))
		_ = lease.Unlock(t.Context())
	}
	require.ErrorIs(t, err, redlock.ErrNotDurable)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	lease, err = l.LockMulti(ctx, []string{"a", "b"}, time.Minute)
	if err == nil {
		_ = lease.Unlock(t.Context())
	}
	require.ErrorIs(t, err, redlock.ErrNotDurable)
}

// Every malformed call fails at once with an error naming what is wrong,
// sends nothing and does not panic; nil leases answer as holding nothing.
func TestMultiKeyBadInputNeitherPanicsNorSends(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	long := strings.Repeat("k", redlock.MaxKeyLen+1)
	many := make([]string, 0, 2*redlock.MaxMultiKeys+2)
	for i := range redlock.MaxMultiKeys + 1 {
		many = append(many, fmt.Sprint("k", i), fmt.Sprint("k", i))
	}
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{[]string{}, "no keys"},
		{[]string{"a", "{a}:fencing"}, "reserved"},
		{[]string{"a", "{a}:redlock-waiters"}, "reserved"},
		{[]string{"a", "a:{t}:fencing"}, "reserved"},
		{[]string{"a", long}, "MaxKeyLen"},
		{[]string{"a", "}"}, "hash tag"},
		{many, "MaxMultiKeys"},
	} {
		_, err := l.TryLockMulti(t.Context(), tc.keys, time.Minute)
		require.ErrorContains(t, err, tc.want, "%q", tc.keys)
		require.NotErrorIs(t, err, redlock.ErrNotObtained)
	}
	for i, m := range c.servers {
		assert.Empty(t, lockKeys(m), "node %d was sent something", i)
	}

	// At the limit: MaxMultiKeys distinct keys, each named twice, with braces.
	limit := make([]string, 0, 2*redlock.MaxMultiKeys)
	for i := range redlock.MaxMultiKeys {
		limit = append(limit, fmt.Sprintf("{t}%d", i), fmt.Sprintf("{t}%d", i))
	}
	lease, err := l.TryLockMulti(t.Context(), limit, time.Minute)
	require.NoError(t, err)
	require.Len(t, lease.Keys(), redlock.MaxMultiKeys)
	for _, k := range lease.Keys() {
		require.NotZero(t, lease.TokenOf(k), k)
	}
	require.NoError(t, lease.Extend(t.Context(), time.Minute))
	require.NoError(t, lease.Check(t.Context()))
	worker := otherLocker(t, c, &redlock.Options{Fencing: true})
	resumed, err := worker.Resume(t.Context(), lease.Handle())
	require.NoError(t, err)
	require.NoError(t, resumed.Unlock(t.Context()))
	drain(t, worker)
	for i, m := range c.servers {
		assert.Empty(t, keysLeft(m), "node %d", i)
	}

	var nilLease *redlock.Lease
	assert.Nil(t, nilLease.Keys())
	assert.Zero(t, nilLease.TokenOf("a"))
	assert.Equal(t, redlock.Handle{}, nilLease.Handle())
	require.ErrorContains(t, nilLease.Do(t.Context(), time.Second, func(context.Context, *redlock.Lease) error { return nil }), "nil *Lease")
	_, err = l.Resume(t.Context(), nilLease.Handle())
	require.ErrorContains(t, err, "no keys")
	var nilLocker *redlock.Locker
	_, err = nilLocker.Resume(t.Context(), redlock.Handle{Keys: []string{"a"}, Value: "v"})
	require.ErrorContains(t, err, "nil *Locker")
	_, err = nilLocker.LockMulti(t.Context(), []string{"a", "b"}, time.Minute)
	require.ErrorContains(t, err, "nil *Locker")

	held, err := l.TryLockMulti(t.Context(), []string{"x", "y"}, time.Minute)
	require.NoError(t, err)
	h := held.Handle()
	h.Keys = append(h.Keys, "")
	h.Tokens = append(h.Tokens, 1)
	_, err = l.Resume(t.Context(), h)
	require.ErrorContains(t, err, "sorted and distinct") // "" sorts first
	h = held.Handle()
	h.Nodes = nil
	_, err = l.Resume(t.Context(), h)
	require.ErrorIs(t, err, redlock.ErrOtherNodes)
	require.ErrorContains(t, held.Do(t.Context(), time.Second, nil), "nil function")
	require.NoError(t, held.Unlock(t.Context()))
}

// A key and the same key wrapped in braces ("x" and "{x}") are two locks
// that share one fencing counter (hashtag.Beside gives both "{x}:fencing").
// Named together in one multi-key lease, and mixed with single-key leases
// of either, each key's tokens still grow and never repeat.
func TestKeysSharingACounterKeepTheirTokensOrdered(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	last := map[string]uint64{}
	seen := map[string]map[uint64]bool{"x": {}, "{x}": {}}
	for i := range 6 {
		var keys []string
		switch i % 3 {
		case 0:
			keys = []string{"{x}", "x"}
		case 1:
			keys = []string{"x"}
		case 2:
			keys = []string{"{x}"}
		}
		lease, err := l.TryLockMulti(t.Context(), keys, time.Minute)
		require.NoError(t, err)
		for _, k := range lease.Keys() {
			tok := lease.TokenOf(k)
			require.Greater(t, tok, last[k], "round %d key %s", i, k)
			require.False(t, seen[k][tok], "round %d key %s token %d again", i, k, tok)
			last[k], seen[k][tok] = tok, true
		}
		require.NoError(t, lease.Unlock(t.Context()))
	}
}

// A multi-key round that fails names the lease's keys, not only the first:
// here b is the busy key, and the error of every operation must say so
// (QuorumError.Key is the first key, "a", which is free).
func TestMultiKeyRoundErrorsNameEveryKey(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), nil)
	c.setOther(t, "b", 0, 1)
	_, err := l.TryLockMulti(t.Context(), []string{"a", "b"}, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Contains(t, err.Error(), `"b"`, "TryLockMulti")
	for _, m := range c.servers {
		m.Del("b")
	}

	lease, err := l.TryLockMulti(t.Context(), []string{"a", "b"}, time.Minute)
	require.NoError(t, err)
	drain(t, l)
	h := lease.Handle()
	c.setOther(t, "b", 0, 1)
	for _, op := range []struct {
		name string
		run  func() error
	}{ // Check's refusal loses the lease, so it goes after Resume
		{"Resume", func() error { _, err := l.Resume(t.Context(), h); return err }},
		{"Check", func() error { return lease.Check(t.Context()) }},
		{"Unlock", func() error { return lease.Unlock(t.Context()) }},
	} {
		err := op.run()
		require.ErrorIs(t, err, redlock.ErrNotHeld, op.name)
		assert.Contains(t, err.Error(), `"b"`, op.name)
	}
}

// A multi-key acquisition whose reply is lost is resent by go-redis; the
// resent script finds every key already holding its value and must return
// the counters without incrementing them again (acquire_multi.lua's
// "mine" path), and the lease is granted with t=1 for every key.
func TestMultiKeyFencingSurvivesClientRetries(t *testing.T) {
	c := newCluster(t, 3)
	proxies, nodes := c.proxied(t)
	l := newLocker(t, nodes, &redlock.Options{Fencing: true, NodeTimeout: 5 * time.Second})
	for _, p := range proxies {
		p.CutReplies(1)
	}
	lease, err := l.TryLockMulti(t.Context(), []string{"a", "b", "c"}, time.Minute)
	require.NoError(t, err)
	drain(t, l)
	for _, k := range lease.Keys() {
		assert.Equal(t, uint64(1), lease.TokenOf(k)>>8, k)
		for i, m := range c.servers {
			v, _ := m.Get("{" + k + "}:fencing")
			assert.Equal(t, "1", v, "node %d counted the retried acquisition of %s twice", i, k)
		}
	}
	require.NoError(t, lease.Unlock(t.Context()))
}
