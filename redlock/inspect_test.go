package redlock_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOwnerLabel(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	labelled := newLocker(t, c.nodes(nil), &redlock.Options{Owner: "host-a:4242"})
	plain := newLocker(t, c.nodes(nil), nil)

	a, err := labelled.TryLock(ctx, "a", 10*time.Second)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(a.Value(), "host-a:4242|"), a.Value())
	assert.Equal(t, "host-a:4242", redlock.OwnerOf(a.Value()))
	b, err := labelled.TryLock(ctx, "b", 10*time.Second)
	require.NoError(t, err)
	assert.NotEqual(t, a.Value(), b.Value(), "the label does not weaken the values' uniqueness")

	// A Locker without the label works alongside, on the same keys.
	_, err = plain.TryLock(ctx, "a", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	p, err := plain.TryLock(ctx, "p", 10*time.Second)
	require.NoError(t, err)
	assert.Empty(t, redlock.OwnerOf(p.Value()))
	require.NoError(t, a.Unlock(ctx))
	p2, err := plain.TryLock(ctx, "a", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, p2.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
	require.NoError(t, p.Unlock(ctx))

	for _, bad := range []string{" x", "x ", "a|b", "tab\there", "é", strings.Repeat("x", redlock.MaxOwnerLen+1)} {
		_, err := redlock.New(c.nodes(nil), &redlock.Options{Owner: bad})
		assert.ErrorContains(t, err, "Options.Owner", "%q", bad)
	}
	assert.Empty(t, redlock.OwnerOf("x|short"), "not a value of this library's")
	assert.Empty(t, redlock.OwnerOf(""))
}

func TestInspect(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	proxies, nodes := c.proxied(t)
	l := newLocker(t, nodes, &redlock.Options{Owner: "worker-7", Fencing: true, NodeTimeout: 300 * time.Millisecond})
	require.NoError(t, l.Warm(ctx))

	in, err := l.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Empty(t, in.Holder)
	assert.Zero(t, in.HeldFor)
	for i, n := range in.Nodes {
		assert.NoError(t, n.Err, "node %d", i)
		assert.False(t, n.Held, "node %d", i)
	}

	lease, err := l.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	drain(t, l)
	in, err = l.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "k", in.Key)
	assert.Equal(t, lease.Value(), in.Holder)
	assert.Equal(t, "worker-7", in.Owner)
	assert.Greater(t, in.HeldFor, 9*time.Second)
	assert.LessOrEqual(t, in.HeldFor, 10*time.Second)
	require.Len(t, in.Nodes, 3)
	for i, n := range in.Nodes {
		assert.Equal(t, i, n.Node)
		assert.True(t, n.Held, "node %d", i)
		assert.Equal(t, lease.Value(), n.Value)
		assert.Equal(t, "worker-7", n.Owner)
		assert.Positive(t, n.TTL)
		assert.Equal(t, uint64(1), n.Counter, "node %d: one fenced acquisition", i)
		assert.Zero(t, n.QuarantineLeft)
		assert.Positive(t, n.Latency)
	}

	// The node guard's state, as this Locker knows it.
	c.servers[2].FlushAll()
	_, _ = l.TryLock(ctx, "other", time.Second)
	drain(t, l)
	in, err = l.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Greater(t, in.Nodes[2].QuarantineLeft, 30*time.Second)
	assert.Contains(t, in.Nodes[2].QuarantineCause, "memory began")
	assert.Zero(t, in.Nodes[0].QuarantineLeft)

	// A key with no expiry (not a lease of this library's) held on a majority.
	for _, m := range c.servers {
		m.Set("forever", "v")
	}
	in, err = l.Inspect(ctx, "forever")
	require.NoError(t, err)
	assert.Equal(t, "v", in.Holder)
	assert.Negative(t, in.HeldFor)

	// Another value on one node, a second node down: each says so; the
	// majority's holder is no longer a majority.
	c.setOther(t, "k", 0)
	proxies[1].SetBlackhole(true)
	in, err = l.Inspect(ctx, "k")
	require.NoError(t, err, "a node that cannot be read says so in its NodeHolding")
	proxies[1].SetBlackhole(false)
	proxies[1].DropConnections() // the unanswered call fails now, not at its read timeout
	assert.Equal(t, "someone-else", in.Nodes[0].Value)
	assert.Empty(t, in.Nodes[0].Owner)
	assert.Equal(t, time.Minute, in.Nodes[0].TTL.Round(time.Minute))
	assert.ErrorContains(t, in.Nodes[1].Err, "no reply")
	assert.False(t, in.Nodes[1].Held)
	assert.False(t, in.Nodes[2].Held, "flushed")
	assert.Empty(t, in.Holder, "no majority holds one value")
}

func TestInspectAndRevokeRejectBadInput(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), nil)
	done, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		key  string
		want string
	}{
		{"nil context", nil, "k", "nil context"},
		{"empty key", t.Context(), "", "empty key"},
		{"too long", t.Context(), strings.Repeat("k", redlock.MaxKeyLen+1), "longer than MaxKeyLen"},
		{"a fencing counter", t.Context(), "{k}:fencing", "fencing counter of lock"},
		{"a tombstone", t.Context(), "{k}:redlock-revoked", `revocation tombstone of lock "k"`},
		{"a tagged tombstone", t.Context(), "a{t}:redlock-revoked", `revocation tombstone of lock "a{t}"`},
		{"a done context", done, "k", "context canceled"},
	} {
		_, err := l.Inspect(tc.ctx, tc.key)
		assert.ErrorContains(t, err, tc.want, "Inspect: %s", tc.name)
		_, err = l.Revoke(tc.ctx, tc.key)
		assert.ErrorContains(t, err, tc.want, "Revoke: %s", tc.name)
	}
	_, err := l.TryLock(t.Context(), "{k}:redlock-revoked", time.Second)
	assert.ErrorContains(t, err, "reserved")
	var nilLocker *redlock.Locker
	_, err = nilLocker.Inspect(t.Context(), "k")
	assert.ErrorContains(t, err, "nil *Locker")
	_, err = nilLocker.Revoke(t.Context(), "k")
	assert.ErrorContains(t, err, "nil *Locker")
}

// Revoke deletes the key on every node whatever its value; the holder's
// next extension finds the tombstone, not a key to heal: Do cancels its
// function with ErrLost, and the next holder's token is higher. The
// negative control deletes the keys the way an operator would without
// Revoke (DEL on every node): the healing extension sets them again and the
// holder goes on, unaware.
func TestRevokeEndsADo(t *testing.T) {
	for _, revoke := range []bool{true, false} {
		name := map[bool]string{true: "Revoke", false: "DEL on every node (negative control)"}[revoke]
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			c := newCluster(t, 3)
			holderEvents, opsEvents := &recorder{}, &recorder{}
			holder := newLocker(t, c.nodes(nil), &redlock.Options{Owner: "app-1", Fencing: true, Observer: holderEvents})
			ops := newLocker(t, c.nodes(nil), &redlock.Options{Owner: "ops:alice", Fencing: true, Observer: opsEvents})

			const ttl = 900 * time.Millisecond
			var revokedToken uint64
			var rev redlock.Revocation
			extendedAfter := false
			err := holder.Do(ctx, "k", ttl, func(ctx context.Context, lease *redlock.Lease) error {
				revokedToken = lease.Token()
				drain(t, holder)
				if revoke {
					var err error
					rev, err = ops.Revoke(ctx, "k")
					require.NoError(t, err)
				} else {
					for _, m := range c.servers {
						m.Del("k")
					}
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(3 * ttl): // several extensions
					extendedAfter = true
					return nil
				}
			})
			if !revoke {
				require.NoError(t, err, "the negative control: the deleted keys were healed back and the holder never knew")
				require.True(t, extendedAfter)
				assert.Empty(t, holderEvents.of(redlock.OpLost))
				return
			}
			require.ErrorIs(t, err, redlock.ErrLost)
			require.False(t, extendedAfter, "the function's context was cancelled")

			require.Len(t, rev.Nodes, 3)
			for i, n := range rev.Nodes {
				assert.NoError(t, n.Err, "node %d", i)
				assert.True(t, n.Deleted, "node %d", i)
				assert.Equal(t, "app-1", n.Owner)
				assert.Positive(t, n.TTL)
			}
			require.Len(t, rev.Holders(), 1)

			e := opsEvents.one(t, redlock.OpRevoke)
			assert.Equal(t, "k", e.Key)
			assert.NoError(t, e.Err)
			assert.Contains(t, e.Detail, "revoked by ops:alice: deleted \"app-1|")
			assert.Contains(t, e.Detail, "on 3 of 3 nodes")

			drain(t, holder)
			assert.Len(t, holderEvents.of(redlock.OpLost), 1)
			ext := holderEvents.of(redlock.OpExtend)
			require.NotEmpty(t, ext)
			last := ext[len(ext)-1]
			assert.ErrorIs(t, last.Err, redlock.ErrNotHeld)
			assert.Contains(t, last.Err.Error(), "revoked by an operator")
			for _, m := range c.servers {
				assert.False(t, m.Exists("k"), "not healed back")
			}

			next, err := ops.TryLock(ctx, "k", time.Second)
			require.NoError(t, err, "the key is free for the next holder")
			assert.Greater(t, next.Token(), revokedToken, "whose token fences the revoked holder off")
			require.NoError(t, next.Unlock(ctx))
		})
	}
}

// A node that does not answer is named; the others are revoked.
func TestRevokeReportsNodesThatDidNotAnswer(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	proxies, nodes := c.proxied(t)
	l := newLocker(t, nodes, &redlock.Options{NodeTimeout: 300 * time.Millisecond})
	require.NoError(t, l.Warm(ctx))
	lease, err := l.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	drain(t, l)
	proxies[2].SetBlackhole(true)
	rev, err := l.Revoke(ctx, "k")
	proxies[2].SetBlackhole(false)
	proxies[2].DropConnections()
	require.Error(t, err)
	assert.ErrorContains(t, err, "1 of 3 nodes failed")
	assert.ErrorIs(t, rev.Nodes[2].Err, quorum.ErrNoReply)
	assert.True(t, rev.Nodes[0].Deleted)
	assert.True(t, rev.Nodes[1].Deleted)
	assert.Equal(t, lease.Value(), rev.Nodes[0].Value)
	require.ErrorIs(t, lease.Check(ctx), redlock.ErrNotHeld, "a majority revoked")

	// A key with no {tag} that holds '}' gets no tombstone: the error says so.
	for _, m := range c.servers {
		m.Set("odd}key", "v")
	}
	rev, err = l.Revoke(ctx, "odd}key")
	assert.ErrorContains(t, err, "no tombstone")
	assert.True(t, rev.Nodes[0].Deleted)
	assert.False(t, c.servers[0].Exists("odd}key"))
}

// Revoke's tombstone outlives every extension the revoked holder may still
// send, so that none heals the key back, on any node. Node 2's copy of the
// lease is about to expire when the key is revoked (it missed the lease's
// last extensions, which nodes 0 and 1 granted): a tombstone that lasted
// only as long as the key had left there would be gone while the holder,
// unaware, still extends, and its next extension would heal the revoked key
// on node 2 for its TTL, held by no one. Node 2's clock is moved on
// (miniredis's FastForward) by however long after the revocation the
// extension reaches it:
//   - one sent before the revocation and held on its way to node 2 (hookNode)
//     for a NodeTimeout;
//   - one sent later, at the end of the lease's validity (MaxTTL here, the
//     longest any lease may last), and a NodeTimeout on its way.
//
// The tombstone lasts MaxTTL and two NodeTimeouts past the revocation (or
// the key's own time left, if longer; see revoke.lua). With it as long as
// the key had left on the node, both extensions heal node 2's key.
func TestTombstoneOutlivesEveryExtensionTheRevokedHolderMaySend(t *testing.T) {
	const (
		maxTTL      = 10 * time.Second
		nodeTimeout = 5 * time.Second
	)
	for _, tc := range []struct {
		name     string
		inFlight bool          // the extension is sent before the revocation
		after    time.Duration // node 2's time from the revocation to the extension's arrival
	}{
		{"sent before the revocation, a NodeTimeout on its way", true, nodeTimeout},
		{"sent at the end of the longest lease, a NodeTimeout on its way", false, maxTTL + nodeTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			c := newCluster(t, 3)
			var hold atomic.Bool
			held, arrive := make(chan struct{}), make(chan struct{})
			slow := &hookNode{beforeScript: func(ctx context.Context, _ []string, args []any) error {
				if isExtension(args) && hold.CompareAndSwap(true, false) {
					close(held)
					select {
					case <-arrive:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			}}
			opts := &redlock.Options{MaxTTL: maxTTL, NodeTimeout: nodeTimeout}
			holder := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
				if i == 2 {
					slow.Node = n
					return slow
				}
				return n
			}), opts)
			ops := otherLocker(t, c, opts)
			lease, err := holder.TryLock(ctx, "k", maxTTL)
			require.NoError(t, err)
			drain(t, holder)
			c.servers[2].SetTTL("k", 50*time.Millisecond) // it missed the lease's last extensions

			if tc.inFlight {
				hold.Store(true)
				require.NoError(t, lease.Extend(ctx, maxTTL), "nodes 0 and 1")
				<-held
			}
			rev, err := ops.Revoke(ctx, "k")
			require.NoError(t, err)
			require.Len(t, rev.Holders(), 1)
			c.servers[2].FastForward(tc.after)
			if tc.inFlight {
				close(arrive)
				drain(t, holder)
			} else {
				require.ErrorIs(t, lease.Extend(ctx, maxTTL), redlock.ErrNotHeld, "nodes 0 and 1 answer that it was revoked")
			}
			assert.Empty(t, c.holding("k", lease.Value()), "the revoked key was healed back")
		})
	}
}

// Revoke's tombstone lasts at least MaxTTL whatever NodeTimeout is: the
// life MaxTTL plus two NodeTimeouts saturates instead of wrapping, so a
// NodeTimeout meant as "no limit" neither shortens the tombstone to the
// time the key had left (a healing extension could set the revoked key
// again after it) nor makes it a negative PX that the node refuses after
// the key was deleted. Control: the default NodeTimeout.
func TestTombstoneLastsAtLeastMaxTTLForAnyNodeTimeout(t *testing.T) {
	const maxTTL = 10 * time.Second
	for _, nodeTimeout := range []time.Duration{0, 1 << 62, math.MaxInt64} {
		for _, expiring := range []bool{true, false} {
			t.Run(fmt.Sprintf("NodeTimeout %v, key expiring %v", nodeTimeout, expiring), func(t *testing.T) {
				ctx := t.Context()
				c := newCluster(t, 3)
				l := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: maxTTL, NodeTimeout: nodeTimeout})
				for _, m := range c.servers {
					require.NoError(t, m.Set("k", "someone"))
					if expiring {
						m.SetTTL("k", time.Second)
					}
				}
				rev, err := l.Revoke(ctx, "k")
				require.NoError(t, err)
				require.Equal(t, []string{"someone"}, rev.Holders())
				for i, m := range c.servers {
					assert.False(t, m.Exists("k"), "node %d: the key was not deleted", i)
					assert.GreaterOrEqual(t, m.TTL("{k}:redlock-revoked"), maxTTL, "node %d: the tombstone's TTL", i)
				}
			})
		}
	}
}

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

// Inspect shows the holder's fencing token as the holder's Lease.Token
// reports it, not a figure to work it out from: which node's label a token
// carries only the acquiring client's decision knows, and a node that
// granted after the decision may hold a higher counter than the token's.
// Here node 4 answers late with a counter far ahead of the others', on
// the fast path (the deciding nodes' counters agree) and on the path that
// waits for phase 2 (they do not), for one key and a multi-key lease.
func TestInspectShowsTheTokenTheHolderSees(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 5)
	rec := &recorder{}
	var late atomic.Pointer[chan struct{}] // node 4's phase 1 waits until it is closed
	nodes := c.nodes(func(i int, n redlock.Node) redlock.Node {
		return &hookNode{Node: n, beforeScript: func(ctx context.Context, keys []string, args []any) error {
			if i == 4 && len(keys) >= 2 && strings.HasSuffix(keys[len(keys)-1], ":fencing") { // phase 1
				if gate := late.Load(); gate != nil {
					select {
					case <-*gate:
					case <-ctx.Done():
					}
				}
			}
			return nil
		}}
	})
	opts := &redlock.Options{Fencing: true, NodeTimeout: 5 * time.Second, Observer: rec}
	l := newLocker(t, nodes, opts)
	// acquire takes the lease with node 4 answering only once the
	// acquisition has been decided.
	acquire := func(keys ...string) *redlock.Lease {
		t.Helper()
		gate := make(chan struct{})
		late.Store(&gate)
		defer close(gate)
		var lease *redlock.Lease
		var err error
		if len(keys) == 1 {
			lease, err = l.TryLock(ctx, keys[0], time.Minute)
		} else {
			lease, err = l.TryLockMulti(ctx, keys, time.Minute)
		}
		require.NoError(t, err)
		return lease
	}
	setCounters := func(key string, counters ...int) {
		for i, m := range c.servers {
			require.NoError(t, m.Set("{"+key+"}:fencing", strconv.Itoa(counters[i])))
		}
	}
	inspectToken := func(key string) (token, highest uint64) {
		t.Helper()
		drain(t, l) // the late node's grant and the record
		in, err := l.Inspect(ctx, key)
		require.NoError(t, err)
		for i, n := range in.Nodes {
			require.NoError(t, n.Err, "node %d", i)
			if n.Held && n.Value == in.Holder {
				highest = max(highest, n.Counter)
			}
			if n.Token != 0 { // the node that issued the token, or every node phase 2 reached
				assert.Equal(t, in.Token, n.Token, "node %d records another token", i)
			}
		}
		return in.Token, highest
	}

	for _, tc := range []struct {
		name     string
		counters []int
		detail   string
	}{
		{"counters agree", []int{59, 59, 59, 59, 100}, redlock.FencedInOneRoundTrip},
		{"counters apart", []int{50, 60, 70, 80, 100}, redlock.FencedInTwoRoundTrips},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setCounters("k", tc.counters...)
			rec.reset()
			lease := acquire("k")
			assert.Equal(t, tc.detail, rec.one(t, redlock.OpAcquire).Detail)
			token, highest := inspectToken("k")
			assert.Equal(t, lease.Token(), token, "Inspect's token is the holder's")
			assert.Equal(t, uint64(101), highest, "node 4 granted late with its own counter")
			assert.NotEqual(t, highest, lease.Token()>>8, "the highest counter among the holding nodes is not the token's: reading counters cannot give the token")
			require.NoError(t, lease.Unlock(ctx))
		})
	}

	t.Run("multi-key lease", func(t *testing.T) {
		setCounters("a", 59, 59, 59, 59, 100)
		setCounters("b", 50, 60, 70, 80, 100)
		lease := acquire("a", "b")
		for _, key := range []string{"a", "b"} {
			token, _ := inspectToken(key)
			assert.Equal(t, lease.TokenOf(key), token, "key %q", key)
			assert.NotZero(t, token, "key %q", key)
		}
		require.NoError(t, lease.Unlock(ctx))
	})

	t.Run("after the release", func(t *testing.T) {
		lease, err := l.TryLock(ctx, "k", time.Minute)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(ctx))
		token, _ := inspectToken("k")
		assert.Zero(t, token, "no holder, no token: the record of a released lease is not shown")
	})

	// The control: without the record (phase 2 never sent), Inspect has
	// no token to show.
	t.Run("without the record", func(t *testing.T) {
		never := newLocker(t, nodes, withHooks(opts, unsafelocker.Hooks{NoFencingPhase2: true}))
		setCounters("k", 59, 59, 59, 59, 100)
		lease, err := never.TryLock(ctx, "k", time.Minute)
		require.NoError(t, err)
		drain(t, never)
		token, _ := inspectToken("k")
		assert.Zero(t, token, "no phase 2, no record: the token %d is nowhere on the nodes", lease.Token())
		require.NoError(t, lease.Unlock(ctx))
	})
}

// recipeCommands are the commands docs/operations.md's least-privilege ACL
// user may run ("+set +get ..."), read from the recipe itself.
func recipeCommands(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^ACL SETUSER app reset .*$`).FindString(string(doc))
	require.NotEmpty(t, line, "docs/operations.md has no ACL recipe")
	allowed := map[string]bool{}
	for _, f := range strings.Fields(line) {
		if c, ok := strings.CutPrefix(f, "+"); ok {
			allowed[c] = true
		}
	}
	return allowed
}

// aclNodes are the cluster's nodes as the recipe's user sees them: a
// command the recipe does not allow is refused as Redis refuses it
// (NOPERM). Scripts' own calls are not checked (the recipe allows what
// they call).
func aclNodes(t *testing.T, c *cluster) []redlock.Node {
	allowed := recipeCommands(t)
	return c.nodes(func(_ int, n redlock.Node) redlock.Node {
		return &hookNode{Node: n, beforeDo: func(_ context.Context, args []any) error {
			name, _ := args[0].(string)
			name = strings.ToLower(name)
			if sub, ok := args[1].(string); ok && (name == "script" || name == "config" || name == "client") {
				name += "|" + strings.ToLower(sub)
			}
			if !allowed[name] {
				return redistest.ServerError(fmt.Sprintf("NOPERM User app has no permissions to run the '%s' command", name))
			}
			return nil
		}}
	})
}

// Inspect shows a fenced lease's token (Inspection.Token, the one
// Lease.TokenOf reports for the key) for a Locker whose user is the least-
// privilege one docs/operations.md gives, which it says is all the library
// needs, Inspect and fencing included: the token record goes by a script
// (record.lua), whose calls the recipe allows, for a single-key lease and
// a multi-key one alike. A record by a command the recipe lacks (MSET,
// say) would be refused on every node, unseen, since nothing waits for it.
func TestInspectShowsAMultiKeyLeasesTokenWithTheLeastPrivilegeACL(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	l := newLocker(t, aclNodes(t, c), &redlock.Options{Fencing: true})

	single, err := l.TryLock(ctx, "lock:one", 10*time.Second)
	require.NoError(t, err)
	drain(t, l) // the record, sent unawaited, has been answered
	in, err := l.Inspect(ctx, "lock:one")
	require.NoError(t, err)
	require.Equal(t, single.Value(), in.Holder)
	require.Equal(t, single.Token(), in.Token, "control: a single-key lease's token, recorded by SET")

	multi, err := l.TryLockMulti(ctx, []string{"lock:a", "lock:b"}, 10*time.Second)
	require.NoError(t, err)
	drain(t, l)
	for _, k := range multi.Keys() {
		in, err := l.Inspect(ctx, k)
		require.NoError(t, err)
		require.Equal(t, multi.Value(), in.Holder, k)
		assert.Equal(t, multi.TokenOf(k), in.Token, "Inspect(%q) shows the holder's token", k)
	}
}

// A fenced lease's token record, sent unawaited after a fast-path
// acquisition, may arrive after its lease ended: here lease A's record to
// node 0 is slow (its call stalls); A is unlocked meanwhile, B takes the
// key with node 0's counter and records its token there, and then A's
// record arrives. The record is written only while the key holds its
// lease's value (record.lua), so B's stays: Inspect shows B's token for
// B's whole TTL, not 0.
func TestInspectShowsTheHoldersTokenAfterAnEarlierLeasesLateRecord(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	var (
		mu    sync.Mutex
		gated = true
	)
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	// Nodes 1 and 2 answer acquisitions a little later than node 0, so that
	// node 0 counts in every decision and its counter issues every token.
	wrap := func(gate bool) func(int, redlock.Node) redlock.Node {
		return func(i int, n redlock.Node) redlock.Node {
			h := &hookNode{Node: n}
			h.beforeScript = func(_ context.Context, keys []string, _ []any) error {
				if i > 0 && len(keys) > 1 && strings.HasSuffix(keys[1], ":fencing") {
					time.Sleep(20 * time.Millisecond)
				}
				if !gate || !slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, ":fencing-token") }) {
					return nil
				}
				mu.Lock()
				hold := gated
				mu.Unlock()
				if hold {
					once.Do(func() { close(arrived) })
					<-release
				}
				return nil
			}
			return h
		}
	}
	la := newLocker(t, c.nodes(wrap(true)), &redlock.Options{Fencing: true})
	lb := newLocker(t, c.nodes(wrap(false)), &redlock.Options{Fencing: true})

	a, err := la.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	<-arrived // A's record is on its way to node 0, and slow
	mu.Lock()
	gated = false
	mu.Unlock()
	require.NoError(t, a.Unlock(ctx))

	b, err := lb.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	drain(t, lb) // B's record is on node 0
	in, err := lb.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, b.Token(), in.Token, "control: before A's record arrives")

	close(release) // A's record arrives
	drain(t, la)
	in, err = lb.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, b.Value(), in.Holder, "B holds the key")
	assert.Positive(t, b.Validity())
	assert.Equal(t, b.Token(), in.Token, "Inspect shows the holder's token")
}

// Locks "a" and "{a}" are two locks (two keys, held at once by two
// leases) whose fencing counter is one: hashtag.Beside wraps an untagged
// key in a tag and keeps a tagged one's, so both count in "{a}:fencing"
// (harmless: it only grows). Their token records are two
// ("{a}:fencing-token-untagged" and "{a}:fencing-token"), so each lease's
// Inspect shows its holder's token once both are written; one record
// would hold the later acquisition's alone, and Inspect("a") would show 0.
func TestInspectShowsTheTokenOfTwoLocksWhoseNamesShareATag(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	// Nodes 1 and 2 answer acquisitions a little later than node 0, so
	// that node 0's counter issues both tokens (as it does most of the
	// time anyway: the lowest node among the first to grant).
	l := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
		if i == 0 {
			return n
		}
		return &hookNode{Node: n, beforeScript: func(_ context.Context, keys []string, _ []any) error {
			if len(keys) > 1 && strings.HasSuffix(keys[1], ":fencing") {
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		}}
	}), &redlock.Options{Fencing: true})

	plain, err := l.TryLock(ctx, "a", 10*time.Second)
	require.NoError(t, err)
	tagged, err := l.TryLock(ctx, "{a}", 10*time.Second)
	require.NoError(t, err, "another lock")
	drain(t, l) // both records written

	for _, lease := range []*redlock.Lease{tagged, plain} {
		in, err := l.Inspect(ctx, lease.Key())
		require.NoError(t, err)
		require.Equal(t, lease.Value(), in.Holder, lease.Key())
		assert.Equal(t, lease.Token(), in.Token, "Inspect(%q) shows its holder's token", lease.Key())
	}
}
