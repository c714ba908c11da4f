package redlock_test

// Adversarial tests of Locker.TrustNewNodes (and of what a QuorumError says
// about quarantined nodes). Each test builds a deployment that is in use
// (a lease is held, on a bare majority) where one node forgot the lease,
// and asserts that TrustNewNodes leaves that node quarantined, as its
// documentation promises: "once the deployment is in use it does nothing, so
// a node that restarted empty beside nodes that remember still waits out its
// quarantine". None of these deployments is the documented caveat (every
// node lost its memory at once): only node 0 forgot.

import (
	"context"
	"crypto/fips140"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/nodeflag"
	"github.com/redlock/redlock/redlock"
)

// freshCluster is n servers as just started: no guard marker.
func freshCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := newCluster(t, n)
	for _, m := range c.servers {
		m.Del("redlock:memory")
	}
	return c
}

// holderNodes are the cluster's nodes for a lease holder: through proxies,
// with clients that do not resend a command on a broken connection (a
// resend would reach node 2 once it is back).
func holderNodes(t *testing.T, c *cluster) ([]*faultnet.Proxy, []redlock.Node) {
	t.Helper()
	return c.proxiedWith(t, func(o *redis.Options) { o.MaxRetries = -1 })
}

// holdOnNodes01 takes key for holder while node 2 is unreachable (its
// proxy down), so that the lease stands on nodes 0 and 1 alone: a bare
// majority, as any lease granted while one node was down. Node 2 is back
// afterwards, without the key.
func holdOnNodes01(t *testing.T, c *cluster, node2 *faultnet.Proxy, holder *redlock.Locker, key string, ttl time.Duration) *redlock.Lease {
	t.Helper()
	node2.SetDown(true)
	lease, err := holder.TryLock(t.Context(), key, ttl)
	require.NoError(t, err)
	drain(t, holder)
	node2.SetDown(false)
	require.Equal(t, []int{0, 1}, c.holding(key, lease.Value()), "the lease stands on nodes 0 and 1")
	require.Equal(t, []int{0, 1}, c.holdingAny(key), "node 2 does not hold the key")
	return lease
}

// holdingAny returns the indexes of servers where key is set.
func (c *cluster) holdingAny(key string) []int {
	var idx []int
	for i, m := range c.servers {
		if m.Exists(key) {
			idx = append(idx, i)
		}
	}
	return idx
}

// trySecondGrant takes key with a Locker of opts starting now, while
// another lease of key is held: it returns the nodes that granted it, if
// they did (the second lease is released at once), or the error.
func trySecondGrant(t *testing.T, c *cluster, key string, ttl time.Duration, opts *redlock.Options) (granted []int, err error) {
	t.Helper()
	next := newLocker(t, c.nodes(nil), opts)
	second, err := next.TryLock(t.Context(), key, ttl)
	if err == nil {
		granted = c.holding(key, second.Value())
		_ = second.Unlock(t.Context())
	}
	drain(t, next)
	return granted, err
}

// requireNoSecondGrant asserts that a program starting now cannot take key
// while lease (which node 0 forgot) is valid: node 0 must still be
// quarantined, or nodes 0 and 2 grant key a second time.
func requireNoSecondGrant(t *testing.T, c *cluster, lease *redlock.Lease, key string, ttl time.Duration, opts *redlock.Options) {
	t.Helper()
	granted, err := trySecondGrant(t, c, key, ttl, opts)
	if err == nil {
		require.Failf(t, "double grant", "nodes %v granted %q again while the first lease is valid for %v more: node 0, which forgot it, was trusted", granted, key, lease.Validity())
	}
	t.Logf("second TryLock: %v", err)
	require.Positive(t, lease.Validity(), "the first lease must still be valid for the check to mean anything")
}

// A deployment is in use whatever the caller's MaxTTL: a Locker with a
// short MaxTTL (3 s) has waited out its quarantine and granted a lease on
// nodes 0 and 1, and node 0 forgot it. A program with a longer MaxTTL (the
// default minute) starts while the nodes' memories are younger than its
// MaxTTL, so to its guard every node is still in its first quarantine; the
// lease's key on node 1 shows the deployment in use, and it trusts
// nothing. Markers declare MaxTTL so that Lockers of different MaxTTL may
// share nodes. The same holds for a caller with the granting Locker's
// MaxTTL.
func TestTrustNewNodesLeavesADeploymentInUseToALongerMaxTTLCaller(t *testing.T) {
	const shortTTL = 3 * time.Second
	for _, callerMaxTTL := range []time.Duration{shortTTL, time.Minute} {
		name := "control: caller with the granting Locker's MaxTTL"
		if callerMaxTTL == time.Minute {
			name = "caller with a longer MaxTTL"
		}
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			c := freshCluster(t, 3)
			proxies, nodes := holderNodes(t, c)
			short := newLocker(t, nodes, &redlock.Options{MaxTTL: shortTTL})
			require.NoError(t, short.Warm(ctx))                       // every memory begins now
			time.Sleep(shortTTL + shortTTL/10 + 100*time.Millisecond) // and the drift bound: whole for short
			lease := holdOnNodes01(t, c, proxies[2], short, "k", shortTTL)
			drain(t, short)
			c.servers[0].FlushAll() // node 0 restarts empty while the lease is held

			caller := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: callerMaxTTL})
			trusted, err := caller.TrustNewNodes(ctx)
			require.NoError(t, err)
			assert.False(t, trusted, "the deployment is in use: a lease granted by nodes 0 and 1 is held, and node 0 forgot it")
			requireNoSecondGrant(t, c, lease, "k", time.Second, &redlock.Options{MaxTTL: shortTTL})
		})
	}
}

// "No marker" is not "new": Lockers with NoQuarantine write no marker and
// grant leases. Node 0 forgets one (held on nodes 0 and 1). A guarded
// program starting now, without TrustNewNodes, quarantines every node (no
// marker: its memory begins now) and cannot take the key; with
// TrustNewNodes, as the quick start calls it on every start, it sees the
// lease's key on node 1 and trusts nothing, so it cannot take the key
// either. The same whether the caller is guarded or has NoQuarantine
// itself (it examines all the same, with a guard of the moment).
func TestTrustNewNodesSeesLeasesOfNoQuarantineLockers(t *testing.T) {
	for _, callerNoQuarantine := range []bool{false, true} {
		name := map[bool]string{false: "guarded caller", true: "NoQuarantine caller"}[callerNoQuarantine]
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			c := freshCluster(t, 3)
			proxies, nodes := holderNodes(t, c)
			plain := newLocker(t, nodes, &redlock.Options{NoQuarantine: true})
			lease := holdOnNodes01(t, c, proxies[2], plain, "k", 10*time.Second)
			drain(t, plain)
			c.servers[0].FlushAll()

			// The negative control: a guarded Locker on its own refuses.
			guarded := newLocker(t, c.nodes(nil), nil)
			_, err := guarded.TryLock(ctx, "k", time.Second)
			require.ErrorIs(t, err, redlock.ErrNodeQuarantined)
			drain(t, guarded)
			for _, m := range c.servers { // as before that Locker's examinations
				m.Del("redlock:memory")
			}

			caller := newLocker(t, c.nodes(nil), &redlock.Options{NoQuarantine: callerNoQuarantine})
			trusted, err := caller.TrustNewNodes(ctx)
			require.NoError(t, err)
			assert.False(t, trusted, "nodes 0 and 1 granted a lease that is still held; node 0 forgot it")
			requireNoSecondGrant(t, c, lease, "k", time.Second, nil)
		})
	}
}

// A Locker whose Options.Clock reads ahead of the system clock (a
// clock.Fake started an hour ahead, following the system clock) sees a
// deployment in use as in use: its guard's quarantine ends are readings of
// that clock, and the lease's key on node 1 shows the use whatever a clock
// says. Locker.Health reads Options.Clock for the same verdicts. The same
// Locker with the system clock, alike.
func TestTrustNewNodesWithAClockAheadOfTheSystemClock(t *testing.T) {
	for _, ahead := range []bool{false, true} {
		name := map[bool]string{false: "control: system clock", true: "Options.Clock an hour ahead"}[ahead]
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			c := newCluster(t, 3) // trusted: in use for long
			proxies, nodes := holderNodes(t, c)
			holder := newLocker(t, nodes, nil)
			lease := holdOnNodes01(t, c, proxies[2], holder, "k", 10*time.Second)
			drain(t, holder)
			c.servers[0].FlushAll()

			opts := &redlock.Options{}
			if ahead {
				fake := clock.NewFakeFollowing(clock.System{}, time.Now().Add(time.Hour))
				fake.SetRate(1)
				opts.Clock = fake
			}
			caller := newLocker(t, c.nodes(nil), opts)
			trusted, err := caller.TrustNewNodes(ctx)
			require.NoError(t, err)
			for i, h := range caller.Health() {
				if i > 0 {
					assert.Zero(t, h.QuarantineLeft, "node %d: whole, by Health's reading of Options.Clock", i)
				}
			}
			assert.False(t, trusted, "nodes 1 and 2 are whole (Health says so); node 0 forgot a held lease")
			requireNoSecondGrant(t, c, lease, "k", time.Second, nil)
		})
	}
}

// trustGate is a Node that runs before() ahead of every run of the trust
// script (Locker.TrustNodes), so that a test can hold a trust back
// between TrustNewNodes' decision and its write: the process paused, or
// its packets to that node slow.
type trustGate struct {
	redlock.Node
	before func()
	after  func() // nil: nothing
}

func (g *trustGate) done() {
	if g.after != nil {
		g.after()
	}
}

// trustSHA is the trust script's digest, computed as the server computes
// it (inside the bypass, so that the test binary starts under
// GODEBUG=fips140=only): the script goes by it once its digest is known.
var trustSHA = func() (digest string) {
	src, err := os.ReadFile("internal/guard/scripts/trust.lua")
	if err != nil {
		panic(err)
	}
	fips140.WithoutEnforcement(func() {
		sum := sha1.Sum(src)
		digest = hex.EncodeToString(sum[:])
	})
	return digest
}()

func (g *trustGate) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha != trustSHA {
		return g.Node.EvalSha(ctx, sha, keys, args...)
	}
	g.before()
	defer g.done()
	return g.Node.EvalSha(ctx, sha, keys, args...)
}

func (g *trustGate) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if !strings.Contains(script, "Locker.TrustNodes: the memory of this server process is whole") {
		return g.Node.Eval(ctx, script, keys, args...)
	}
	g.before()
	defer g.done()
	return g.Node.Eval(ctx, script, keys, args...)
}

// A QuorumError offers no trust ("trust them once: redlock-admin ...
// trust -yes") where the round itself shows the deployment in use: node 1
// answered that the key is held (by a lease granted on nodes 0 and 1), and
// node 0 is quarantined because it restarted empty. Following such an
// offer would grant the key a second time; the test follows it where it is
// made, to show what it would cost.
func TestQuarantineRemedyIsNotOfferedWhileALeaseIsHeld(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	proxies, nodes := holderNodes(t, c)
	holder := newLocker(t, nodes, nil)
	lease := holdOnNodes01(t, c, proxies[2], holder, "k", 10*time.Second)
	drain(t, holder)
	c.servers[0].FlushAll()

	other := newLocker(t, c.nodes(nil), nil)
	_, err := other.TryLock(ctx, "k", time.Second)
	require.Error(t, err)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	require.Equal(t, redlock.Taken, qe.Nodes[1].Outcome, "node 1: held by the first lease")
	drain(t, other)
	msg := err.Error()
	if strings.Contains(msg, "trust -yes") {
		// What the error says to do.
		require.NoError(t, other.TrustNodes(ctx))
		second, err2 := other.TryLock(ctx, "k", time.Second)
		if err2 == nil {
			_ = second.Unlock(ctx)
		}
		assert.Error(t, err2, "the remedy's trust lets nodes 0 and 2 grant k again while the first lease is valid (%v left)", lease.Validity())
	}
	assert.NotContains(t, msg, "trust -yes", "node 1 said the key is held: the deployment is in use, and node 0 forgot; the error offers the trust anyway: %s", msg)
}

// The trust a QuorumError offers names each node as redlock-admin takes
// it, database included: nodes in database 3 are printed as
// redis://host:port/3, so the printed command trusts the markers the
// Locker reads (printed as host:port alone, it would trust database 0's,
// report success, and leave the Locker's nodes quarantined). The command
// is run here as redlock-admin runs it (nodeflag.Options, one
// redis.Client each, Locker.TrustNodes).
func TestQuarantineRemedyNamesTheDatabase(t *testing.T) {
	ctx := t.Context()
	c := freshCluster(t, 3)
	var nodes []redlock.Node
	for _, m := range c.servers {
		cl := redis.NewClient(&redis.Options{Addr: m.Addr(), DB: 3})
		t.Cleanup(func() { cl.Close() })
		nodes = append(nodes, cl)
	}
	l := newLocker(t, nodes, nil)
	_, err := l.TryLock(ctx, "k", time.Second)
	quarantined(t, err, memoryCause)
	drain(t, l)
	msg := err.Error()
	require.Contains(t, msg, "db 3", "the node names say the database")
	_, rest, ok := strings.Cut(msg, "redlock-admin -nodes ")
	require.True(t, ok, "a remedy: %s", msg)
	list, _, _ := strings.Cut(rest, " trust -yes")

	options, err := nodeflag.Options(nodeflag.Split(list), nodeflag.TLSFiles{})
	require.NoError(t, err, "the printed -nodes %q", list)
	var admin []redlock.Node
	for _, o := range options {
		cl := redis.NewClient(o)
		t.Cleanup(func() { cl.Close() })
		admin = append(admin, cl)
	}
	require.NoError(t, newLocker(t, admin, nil).TrustNodes(ctx), "the printed command succeeds")

	lease, err := l.TryLock(ctx, "k", time.Second)
	require.NoError(t, err, "after the printed command, as the error promised")
	require.NoError(t, lease.Unlock(ctx))
}
