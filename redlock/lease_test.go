package redlock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/redlock"
)

// Behaviour 7: Unlock and Extend compare the value in Lua; a lease never
// deletes or extends another holder's value.
func TestUnlockAndExtendNeverTouchAnotherHolder(t *testing.T) {
	c := newCluster(t, 5)
	l := newLocker(t, c.nodes(nil), nil)
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	drain(t, l)

	// Our keys expire and someone else takes three nodes.
	for _, m := range c.servers {
		m.Del("k")
	}
	c.setOther(t, "k", 0, 1, 2)

	err = lease.Extend(t.Context(), time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.LessOrEqual(t, lease.Validity(), time.Duration(0), "a failed Extend leaves no validity")
	for _, i := range []int{0, 1, 2} {
		assert.Equal(t, time.Minute, c.servers[i].TTL("k"), "node %d: another holder's TTL changed", i)
	}

	err = lease.Unlock(t.Context())
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.Equal(t, []int{0, 1, 2}, c.holding("k", "someone-else"), "another holder's value was deleted")
}

// Behaviour 7: Extend computes the new validity from its own start, refuses a
// lapsed lease, and goes through NOSCRIPT fallback after a script flush.
func TestExtend(t *testing.T) {
	c := newCluster(t, 3)
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newLocker(t, c.nodes(nil), &redlock.Options{Clock: fake, NodeTimeout: 5 * time.Second})
	lease, err := l.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	drain(t, l)

	fake.Advance(500 * time.Millisecond)
	extendStart := fake.Now()
	for _, cl := range c.clients { // a restart or SCRIPT FLUSH empties the script cache
		require.NoError(t, cl.ScriptFlush(t.Context()).Err())
	}
	require.NoError(t, lease.Extend(t.Context(), 2*time.Second))
	assert.Equal(t, extendStart.Add(2*time.Second-22*time.Millisecond), lease.Until())
	drain(t, l)
	for i, m := range c.servers {
		assert.Equal(t, 2*time.Second, m.TTL("k"), "node %d", i)
	}

	// Past Until, Extend refuses without asking the nodes.
	fake.Advance(3 * time.Second)
	err = lease.Extend(t.Context(), time.Second)
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.Contains(t, err.Error(), "validity ran out")
	for i, m := range c.servers {
		assert.Equal(t, 2*time.Second, m.TTL("k"), "node %d: a lapsed lease was extended", i)
	}
	require.NoError(t, lease.Unlock(t.Context()), "the keys were still there: Unlock deletes them")
}

// Behaviour 7: an Extend that wins a majority too late is a failure.
func TestExtendWithoutValidityLeftFails(t *testing.T) {
	c := newCluster(t, 3)
	fake := clock.NewFake(time.Unix(0, 0))
	var slow atomic.Bool
	l := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
		return &hookNode{Node: n, beforeScript: func(context.Context, []string, []any) error {
			// Two of three nodes are slow, so every majority waits for one
			// (with one slow node, the other two could decide first).
			if slow.Load() && i < 2 {
				fake.Advance(time.Second)
			}
			return nil
		}}
	}), &redlock.Options{Clock: fake, NodeTimeout: 5 * time.Second})
	lease, err := l.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	slow.Store(true)
	err = lease.Extend(t.Context(), time.Second)
	require.Error(t, err)
	assert.LessOrEqual(t, lease.Validity(), time.Duration(0))
}

// Behaviour 8: what Unlock returns.
func TestUnlockOutcomes(t *testing.T) {
	t.Run("majority deleted", func(t *testing.T) {
		c := newCluster(t, 5)
		l := newLocker(t, c.nodes(nil), nil)
		lease, err := l.TryLock(t.Context(), "k", time.Minute)
		require.NoError(t, err)
		c.servers[0].Del("k") // a minority lost the key: still a clean unlock
		require.NoError(t, lease.Unlock(t.Context()))
		drain(t, l)
		assert.Empty(t, c.holding("k", lease.Value()))
		assert.LessOrEqual(t, lease.Validity(), time.Duration(0))
	})

	t.Run("expired on the nodes", func(t *testing.T) {
		c := newCluster(t, 5)
		l := newLocker(t, c.nodes(nil), nil)
		lease, err := l.TryLock(t.Context(), "k", time.Second)
		require.NoError(t, err)
		drain(t, l)
		for _, m := range c.servers {
			m.FastForward(2 * time.Second)
		}
		err = lease.Unlock(t.Context())
		require.ErrorIs(t, err, redlock.ErrNotHeld)
	})

	t.Run("already unlocked", func(t *testing.T) {
		c := newCluster(t, 3)
		l := newLocker(t, c.nodes(nil), nil)
		lease, err := l.TryLock(t.Context(), "k", time.Minute)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(t.Context()))
		for name, f := range map[string]func(context.Context) error{
			"Unlock": lease.Unlock,
			"Check":  lease.Check,
			"Extend": func(ctx context.Context) error { return lease.Extend(ctx, time.Minute) },
		} {
			err := f(t.Context())
			assert.ErrorIs(t, err, redlock.ErrNotHeld, name)
			assert.Contains(t, err.Error(), "unlocked", name)
		}
	})

	t.Run("nodes failed", func(t *testing.T) {
		c := newCluster(t, 5)
		l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: time.Second})
		lease, err := l.TryLock(t.Context(), "k", time.Minute)
		require.NoError(t, err)
		drain(t, l)
		for _, i := range []int{1, 2, 3} {
			c.servers[i].Close()
		}
		err = lease.Unlock(t.Context())
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe)
		assert.Equal(t, "unlock", qe.Op)
		assert.NotErrorIs(t, err, redlock.ErrNotHeld)
	})

	t.Run("hung node does not hang Unlock", func(t *testing.T) {
		c := newCluster(t, 3)
		proxies, nodes := c.proxied(t)
		const nodeTimeout = 200 * time.Millisecond
		l := newLocker(t, nodes, &redlock.Options{NodeTimeout: nodeTimeout})
		lease, err := l.TryLock(t.Context(), "k", time.Minute)
		require.NoError(t, err)
		drain(t, l)
		for _, p := range proxies[1:] {
			p.SetBlackhole(true)
		}
		start := time.Now()
		err = lease.Unlock(t.Context())
		took := time.Since(start)
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe)
		assert.Less(t, took, nodeTimeout+2*time.Second, "Unlock waited past NodeTimeout for hung nodes")
		for _, p := range proxies {
			p.SetBlackhole(false)
			p.DropConnections()
		}
	})

	t.Run("cancelled caller still cleans up", func(t *testing.T) {
		c := newCluster(t, 3)
		l := newLocker(t, c.nodes(nil), nil)
		ctx, cancel := context.WithCancel(t.Context())
		lease, err := l.TryLock(ctx, "k", time.Minute)
		require.NoError(t, err)
		cancel()
		require.NoError(t, lease.Unlock(ctx))
		drain(t, l)
		assert.Empty(t, c.holding("k", lease.Value()))
	})
}

// Check asks the nodes.
func TestCheck(t *testing.T) {
	c := newCluster(t, 5)
	l := newLocker(t, c.nodes(nil), nil)
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	drain(t, l)
	require.NoError(t, lease.Check(t.Context()))
	c.servers[0].Del("k")
	c.servers[1].Del("k")
	require.NoError(t, lease.Check(t.Context()), "a minority lost the key")
	c.setOther(t, "k", 2)
	require.ErrorIs(t, lease.Check(t.Context()), redlock.ErrNotHeld)
}

// Behaviour 10: bad input is an error naming the problem; nothing is sent.
func TestBadInput(t *testing.T) {
	c := newCluster(t, 3)
	hooks := make([]*hookNode, 3)
	nodes := c.nodes(func(i int, n redlock.Node) redlock.Node {
		hooks[i] = &hookNode{Node: n}
		return hooks[i]
	})

	newCases := []struct {
		name  string
		nodes []redlock.Node
		opts  *redlock.Options
		want  string
	}{
		{"no nodes", nil, nil, "no nodes"},
		{"nil node", []redlock.Node{nodes[0], nil}, nil, "node 1 is nil"},
		{"typed nil node", []redlock.Node{nodes[0], (*redis.Client)(nil)}, nil, "node 1 is a nil *redis.Client"},
		{"same node twice", []redlock.Node{nodes[0], nodes[1], nodes[0]}, nil, "nodes 0 and 2 are the same server"},
		{"two clients of one server", []redlock.Node{c.clients[0], newClient(t, c.servers[0].Addr())}, nil, "same server"},
		{"two databases of one server", []redlock.Node{c.clients[0], c.clients[1], redis.NewClient(&redis.Options{Addr: c.servers[0].Addr(), DB: 1})}, nil, "nodes 0 and 2 are the same server"},
		{"negative NodeTimeout", nodes, &redlock.Options{NodeTimeout: -1}, "NodeTimeout"},
		{"negative RetryDelay", nodes, &redlock.Options{RetryDelay: -1}, "RetryDelay"},
		{"negative RetryJitter", nodes, &redlock.Options{RetryJitter: -1}, "RetryJitter"},
		{"negative DriftFixed", nodes, &redlock.Options{DriftFixed: -1}, "DriftFixed"},
		{"DriftFactor 1", nodes, &redlock.Options{DriftFactor: 1}, "DriftFactor"},
		{"negative DriftFactor", nodes, &redlock.Options{DriftFactor: -0.5}, "DriftFactor"},
		{"negative MaxTTL", nodes, &redlock.Options{MaxTTL: -1}, "MaxTTL"},
	}
	for _, tt := range newCases {
		t.Run("New/"+tt.name, func(t *testing.T) {
			l, err := redlock.New(tt.nodes, tt.opts)
			require.Error(t, err)
			assert.Nil(t, l)
			assert.Contains(t, err.Error(), tt.want)
		})
	}

	opts := &redlock.Options{}
	l := newLocker(t, nodes, opts)
	opts.NodeTimeout = -1 // New copied the options: this must change nothing
	done, cancel := context.WithCancel(t.Context())
	cancel()
	lockCases := []struct {
		name string
		ctx  context.Context
		key  string
		ttl  time.Duration
		want string
	}{
		{"empty key", t.Context(), "", time.Second, "empty key"},
		{"oversized key", t.Context(), strings.Repeat("k", redlock.MaxKeyLen+1), time.Second, "longer than MaxKeyLen"},
		{"zero ttl", t.Context(), "k", 0, "must be positive"},
		{"negative ttl", t.Context(), "k", -time.Second, "must be positive"},
		{"ttl under a millisecond", t.Context(), "k", time.Microsecond, "resolution"},
		{"ttl within the drift bound", t.Context(), "k", 2 * time.Millisecond, "drift allowance"},
		{"ttl above MaxTTL", t.Context(), "k", time.Minute + time.Millisecond, "ttl 1m0.001s is longer than Options.MaxTTL (1m0s)"},
		{"nil context", nil, "k", time.Second, "nil context"},
		{"context already done", done, "k", time.Second, "context canceled"},
		{"a fencing counter's name", t.Context(), "{k}:fencing", time.Second, `reserved: it is the fencing counter of lock "k"`},
		{"a tagged lock's counter's name", t.Context(), "a{t}:fencing", time.Second, `reserved: it is the fencing counter of lock "a{t}"`},
	}
	for _, tt := range lockCases {
		for name, lock := range map[string]func(context.Context, string, time.Duration) (*redlock.Lease, error){
			"TryLock": l.TryLock, "Lock": l.Lock,
		} {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				ctx := tt.ctx
				if ctx != nil && ctx.Err() == nil { // bounded, should Lock wait instead of refusing
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
				}
				lease, err := lock(ctx, tt.key, tt.ttl)
				require.Error(t, err)
				assert.Nil(t, lease)
				assert.Contains(t, err.Error(), tt.want)
			})
		}
	}
	for i, h := range hooks {
		assert.Empty(t, h.recordedSets(), "node %d: bad input reached a node", i)
	}

	t.Run("bad Extend", func(t *testing.T) {
		lease, err := l.TryLock(t.Context(), "k", time.Minute)
		require.NoError(t, err)
		defer lease.Unlock(t.Context())
		assert.ErrorContains(t, lease.Extend(t.Context(), 0), "must be positive")
		assert.ErrorContains(t, lease.Extend(t.Context(), 2*time.Minute), "longer than Options.MaxTTL")
		err = l.Do(t.Context(), "other", 2*time.Minute, func(context.Context, *redlock.Lease) error {
			t.Error("Do ran its function with a TTL above MaxTTL")
			return nil
		})
		assert.ErrorContains(t, err, "longer than Options.MaxTTL")
		assert.ErrorContains(t, lease.Extend(done, time.Minute), "context canceled")
		assert.ErrorContains(t, lease.Check(done), "context canceled")
		assert.NoError(t, lease.Check(t.Context()), "rejected calls must not harm the lease")
	})

	t.Run("nil receivers", func(t *testing.T) {
		var lease *redlock.Lease
		assert.Error(t, lease.Unlock(t.Context()))
		assert.Error(t, lease.Extend(t.Context(), time.Second))
		assert.Error(t, lease.Check(t.Context()))
		assert.Empty(t, lease.Key())
		assert.LessOrEqual(t, lease.Validity(), time.Duration(0))
		select {
		case <-lease.Done():
		default:
			t.Error("a nil lease's Done must be closed: it holds nothing")
		}
		var locker *redlock.Locker
		_, err := locker.TryLock(t.Context(), "k", time.Second)
		assert.Error(t, err)
		_, err = locker.Lock(t.Context(), "k", time.Second)
		assert.Error(t, err)
		assert.Error(t, locker.Do(t.Context(), "k", time.Second, func(context.Context, *redlock.Lease) error { return nil }))
		assert.ErrorContains(t, locker.Drain(t.Context()), "nil *Locker")
		assert.Nil(t, locker.Durability(t.Context()))
		//lint:ignore SA1012 a nil context is the bad input under test
		assert.ErrorContains(t, l.Drain(nil), "nil context") //nolint:staticcheck
	})

	t.Run("names that are not counters are free", func(t *testing.T) {
		for _, key := range []string{"k:fencing", "{k}:fencing:x", "{}:fencing", "fencing"} {
			lease, err := l.TryLock(t.Context(), key, time.Minute)
			require.NoError(t, err, key)
			require.NoError(t, lease.Unlock(t.Context()))
		}
	})
}

// Behaviour 11: go-redis resends a command whose reply was lost; the resent
// SET finds this very value and must count as granted, and resent Extend and
// Unlock stay correct. The proxy lets each command reach the server and be
// executed, then cuts the connection before the reply returns.
func TestClientRetriesAreSafe(t *testing.T) {
	c := newCluster(t, 3)
	proxies, nodes := c.proxied(t)
	l := newLocker(t, nodes, &redlock.Options{NodeTimeout: 5 * time.Second})
	cutAll := func() {
		for _, p := range proxies {
			p.CutReplies(1)
		}
	}

	cutAll() // every node's first SET reply is lost: only retries can grant
	lease, err := l.TryLock(t.Context(), "k", 30*time.Second)
	require.NoError(t, err, "a retried SET finding its own value must count as granted")
	drain(t, l)
	assert.Equal(t, []int{0, 1, 2}, c.holding("k", lease.Value()))

	cutAll()
	require.NoError(t, lease.Extend(t.Context(), time.Minute), "a repeated extend must still succeed")
	drain(t, l)
	for i, m := range c.servers {
		assert.Equal(t, time.Minute, m.TTL("k"), "node %d", i)
	}

	proxies[0].CutReplies(1) // a minority's delete is repeated and finds the key gone
	require.NoError(t, lease.Unlock(t.Context()))
	drain(t, l)
	assert.Empty(t, c.holding("k", lease.Value()))
}

// Behaviour 12: keys travel as KEYS[] (Redis Cluster routes by them), and the
// Locker works through cluster clients.
func TestKeysArePassedAsKeys(t *testing.T) {
	c := newCluster(t, 3)
	hooks := make([]*hookNode, 3)
	l := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
		hooks[i] = &hookNode{Node: n}
		return hooks[i]
	}), nil)
	lease, err := l.TryLock(t.Context(), "{user:7}:lock", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lease.Extend(t.Context(), time.Minute))
	require.NoError(t, lease.Check(t.Context()))
	require.NoError(t, lease.Unlock(t.Context()))
	drain(t, l)
	for i, h := range hooks {
		h.mu.Lock()
		require.NotEmpty(t, h.scriptKeys)
		for _, keys := range h.scriptKeys {
			// The release's key with the key's line of waiters; the
			// extension's and check's with its revocation tombstone;
			// each in the key's hash slot.
			assert.Contains(t, [][]string{
				{"{user:7}:lock", "{user:7}:lock:redlock-waiters"},
				{"{user:7}:lock", "{user:7}:lock:redlock-revoked"},
			}, keys, "node %d", i)
		}
		h.mu.Unlock()
	}

	// The same through cluster clients, one single-node cluster per master.
	var nodes []redlock.Node
	for _, m := range c.servers {
		nodes = append(nodes, newClusterClient(t, m.Addr()))
	}
	lc := newLocker(t, nodes, nil)
	require.NoError(t, lc.TrustNodes(t.Context())) // a marker per slot
	lease, err = lc.TryLock(t.Context(), "{user:7}:lock", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lease.Extend(t.Context(), time.Minute))
	require.NoError(t, lease.Unlock(t.Context()))
}

// A release is cleanup and must land even when it is slow: EVALSHA answered
// NOSCRIPT after NodeTimeout (an empty script cache, a slow node), and the
// EVAL that follows must still be sent, not dropped for an expired deadline.
func TestSlowReleaseStillLands(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
		if i == 0 {
			return &hookNode{Node: n, evalShaDelay: 300 * time.Millisecond}
		}
		return n
	}), &redlock.Options{NodeTimeout: 100 * time.Millisecond})
	// Lock, not TryLock: on a loaded machine an attempt may miss the
	// NodeTimeout on every node; the release is the point here.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lease, err := l.Lock(ctx, "k", time.Minute)
	require.NoError(t, err)
	drain(t, l)
	// Nodes 1 and 2 decide the Unlock; under load they too may miss the
	// NodeTimeout, and the release still goes to every node: the key is
	// what must be gone.
	if err := lease.Unlock(t.Context()); err != nil {
		t.Logf("Unlock: %v", err)
	}
	drain(t, l)
	assert.Empty(t, c.holding("k", lease.Value()), "the slow node kept the key")
}

// MaxTTL may be raised for locks held longer; the default refuses them.
func TestMaxTTL(t *testing.T) {
	c := newCluster(t, 3)
	long := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: time.Hour})
	lease, err := long.TryLock(t.Context(), "k", time.Hour)
	require.NoError(t, err)
	require.NoError(t, lease.Extend(t.Context(), 30*time.Minute))
	require.NoError(t, lease.Unlock(t.Context()))
	_, err = long.TryLock(t.Context(), "k", time.Hour+time.Millisecond)
	require.ErrorContains(t, err, "longer than Options.MaxTTL (1h0m0s)")
}

// An Extend that leaves the lease lost says so with ErrNotHeld, even when
// too few nodes answered for the refusals alone to decide the round: granted
// on 3 of 5, one of those now held by another value, and the two that
// refused the acquisition down. Two may still hold it; 3 are needed.
func TestExtendThatLosesTheLeaseIsNotHeld(t *testing.T) {
	c := newCluster(t, 5)
	c.setOther(t, "k", 3, 4)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NodeTimeout: 2 * time.Second})
	lease, err := l.TryLock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err)
	drain(t, l)
	require.Equal(t, 3, lease.Holders())

	c.servers[0].Del("k")
	c.setOther(t, "k", 0)
	c.servers[3].Close()
	c.servers[4].Close()
	err = lease.Extend(t.Context(), 10*time.Second)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "the lease is lost: %v", err)
	require.ErrorIs(t, lease.Extend(t.Context(), 10*time.Second), redlock.ErrNotHeld, "and stays lost")
	drain(t, l)
}
