package redlock_test

import (
	"context"
	"crypto/fips140"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/nodeflag"
	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oldMemory marks m's memory as begun age ago on its own clock, by Lockers
// that declared maxTTL: what an examination writes on a server in use
// (miniredis names no run_id: "?").
func oldMemory(t *testing.T, c *cluster, age, maxTTL time.Duration, idx ...int) {
	t.Helper()
	began := time.Now().Add(-age).UnixMilli()
	for _, i := range idx {
		require.NoError(t, c.servers[i].Set("redlock:memory", fmt.Sprintf("%d ? %d", began, maxTTL.Milliseconds())))
	}
}

// A deployment ten minutes in use by Lockers with the default MaxTTL (a
// minute): every node's memory is whole to them. A lease stands on nodes 0
// and 1 (node 2 missed the grant), then node 0 restarts empty: the guard
// quarantines it for a minute. A program that declares a longer MaxTTL
// (an hour) starts and calls TrustNewNodes, as the docs say to do on every
// start: to its guard, memories ten minutes old are still in their first
// quarantine, but the lease's key on node 1 shows the deployment in use,
// so it trusts nothing, and nobody takes k again while the lease is held.
func TestTrustNewNodesLeavesADeploymentInUseToALongerMaxTTL(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	oldMemory(t, c, 10*time.Minute, redlock.DefaultMaxTTL, 0, 1, 2)

	a := newLocker(t, c.nodes(nil), nil) // the deployment's Lockers: MaxTTL a minute
	lease, err := a.TryLock(ctx, "k", 50*time.Second)
	require.NoError(t, err)
	drain(t, a)
	c.servers[2].Del("k") // node 2 missed the grant (a write lost on the way, a timeout)
	require.Equal(t, []int{0, 1}, c.holding("k", lease.Value()), "the lease stands on nodes 0 and 1")

	c.servers[0].FlushAll() // node 0 restarts empty while the lease is held

	// Control: a program with the deployment's own MaxTTL leaves it alone.
	same, err := newLocker(t, c.nodes(nil), nil).TrustNewNodes(ctx)
	require.NoError(t, err)
	require.False(t, same, "control: the deployment is in use")

	// A program that declares a longer MaxTTL.
	long := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: time.Hour})
	trusted, err := long.TrustNewNodes(ctx)
	require.NoError(t, err)
	assert.False(t, trusted, "a deployment ten minutes in use, whose node 0 forgot a held lease, is trusted as new")

	if granted, err := trySecondGrant(t, c, "k", 10*time.Second, nil); err == nil {
		t.Errorf("k granted twice while the first lease is held: the second stood on %v", granted)
	}
	_ = lease.Unlock(ctx) // node 0 forgot it, and node 1 alone is no quorum
}

// A majority forgets beside a node whose memory is intact but young, and
// which even holds the lease (its grant did not count, but stands): every
// node's memory is younger than MaxTTL, as in a new deployment, yet the
// lease's key on node 2 shows the deployment in use. Two ways to get
// there: node 2 is a server new to the deployment (a replacement, still in
// its first quarantine), or a rolling restart without persistence, one
// node after another, less than MaxTTL apart (node 2 first, then 0 and 1
// while a lease granted by them is held). The guard alone keeps every node
// out (control); TrustNewNodes, called by a program that starts meanwhile,
// trusts nothing, and k is not granted twice.
func TestTrustNewNodesSeesALeaseOnAYoungNode(t *testing.T) {
	ctx := t.Context()
	for _, how := range []string{"node 2 is a new server", "a rolling restart: node 2 first"} {
		for _, control := range []bool{false, true} {
			name := how
			if control {
				name += "; control: without TrustNewNodes the guard holds"
			}
			t.Run(name, func(t *testing.T) {
				c := newCluster(t, 3)
				if how == "node 2 is a new server" {
					oldMemory(t, c, 10*time.Minute, redlock.DefaultMaxTTL, 0, 1)
					c.servers[2].Del("redlock:memory")
				} else {
					oldMemory(t, c, 10*time.Minute, redlock.DefaultMaxTTL, 0, 1, 2)
				}
				a := newLocker(t, c.nodes(nil), nil)
				if how != "node 2 is a new server" {
					// The deployment in use; then node 2 restarts empty.
					l, err := a.TryLock(ctx, "warm", time.Second)
					require.NoError(t, err)
					require.NoError(t, l.Unlock(ctx))
					c.servers[2].FlushAll()
				}
				lease, err := a.TryLock(ctx, "k", 50*time.Second)
				require.NoError(t, err, "nodes 0 and 1 are whole")
				drain(t, a)
				require.Equal(t, []int{0, 1, 2}, c.holding("k", lease.Value()), "node 2 holds it too, its vote not counted")

				c.servers[0].FlushAll() // nodes 0 and 1 restart empty while the lease is held
				c.servers[1].FlushAll()

				if !control {
					trusted, err := newLocker(t, c.nodes(nil), nil).TrustNewNodes(ctx)
					require.NoError(t, err)
					assert.False(t, trusted, "nodes 0 and 1 forgot a held lease; node 2's memory did not lapse")
				}
				if granted, err := trySecondGrant(t, c, "k", 10*time.Second, nil); err == nil {
					t.Errorf("k granted twice while the first lease is held: the second stood on %v", granted)
				} else {
					quarantined(t, err, memoryCause)
				}
				_ = lease.Unlock(ctx)
			})
		}
	}
}

// A clock stepped back makes an old memory look young: the guard reads a
// memory's age on the node's own clock (TIME less the marker's began), and
// a backward step (NTP correcting a clock that ran ahead, a VM restored)
// shortens it. The guard's quarantine treats that as the safe direction;
// TrustNewNodes, which would take such a deployment for new by the ages
// alone, sees the lease's key on node 1 and trusts nothing, so node 0,
// which restarted empty while the lease is held, stays out.
func TestTrustNewNodesSeesADeploymentInUseAfterAClockStepBack(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	oldMemory(t, c, 10*time.Minute, redlock.DefaultMaxTTL, 0, 1, 2)
	a := newLocker(t, c.nodes(nil), nil)
	lease, err := a.TryLock(ctx, "k", 50*time.Second)
	require.NoError(t, err)
	drain(t, a)
	c.servers[2].Del("k") // node 2 missed the grant: the lease stands on nodes 0 and 1
	c.servers[0].FlushAll()

	// Control: the clocks as they were, the deployment is in use.
	same, err := newLocker(t, c.nodes(nil), nil).TrustNewNodes(ctx)
	require.NoError(t, err)
	require.False(t, same, "control")

	for _, m := range c.servers { // the servers' host clock steps back ten minutes
		m.SetTime(time.Now().Add(-10 * time.Minute))
	}
	trusted, err := newLocker(t, c.nodes(nil), nil).TrustNewNodes(ctx)
	require.NoError(t, err)
	assert.False(t, trusted, "a deployment in use, whose node 0 forgot a held lease, trusted after a clock step back")

	if granted, err := trySecondGrant(t, c, "k", 10*time.Second, nil); err == nil {
		t.Errorf("k granted twice while the first lease is held: the second stood on %v", granted)
	}
	_ = lease.Unlock(ctx)
}

// TrustNewNodes checks, then trusts: two steps. Here its trust of node 0
// is held back between them (the program paused, or its packets to node 0
// slow) while the deployment comes into use: an operator trusts the nodes,
// a lease is granted on nodes 0 and 1, and node 0 restarts empty. When the
// held-back trust arrives, node 0's marker is no longer the one the check
// saw, so node 0 is not declared whole: it keeps its quarantine,
// TrustNewNodes reports false, and nobody takes the key again while the
// lease is valid. The same for a caller with NoQuarantine, which examines
// the nodes for its check all the same (a condition of "no marker" would
// hold again after the flush). The control trusts whatever changed since
// the check: node 0, which forgot the lease, votes again, and nodes 0 and
// 2 grant the key a second time.
func TestTrustNewNodesDoesNotTrustANodeThatChangedSinceItsCheck(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		noQuarantine, control bool
	}{
		{"conditional trust", false, false},
		{"conditional trust, by a Locker with NoQuarantine", true, false},
		{"unconditional trust (control)", false, true},
	} {
		control := tc.control
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			c := freshCluster(t, 3)
			reached, release := make(chan struct{}), make(chan struct{})
			starting := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
				if i != 0 {
					return n
				}
				return &trustGate{Node: n, before: func() { close(reached); <-release }}
			}), withHooks(&redlock.Options{NoQuarantine: tc.noQuarantine}, unsafelocker.Hooks{UnconditionalTrust: control}))
			type result struct {
				trusted bool
				err     error
			}
			done := make(chan result, 1)
			go func() {
				trusted, err := starting.TrustNewNodes(ctx)
				done <- result{trusted, err}
			}()
			<-reached // checked: every node new; trusting node 0 is held back

			proxies, nodes := holderNodes(t, c)
			holder := newLocker(t, nodes, nil)
			require.NoError(t, holder.TrustNodes(ctx), "an operator trusts the new deployment")
			lease := holdOnNodes01(t, c, proxies[2], holder, "k", 10*time.Second)
			c.servers[0].FlushAll() // node 0 restarts empty while the lease is held

			close(release)
			r := <-done
			require.NoError(t, r.err)
			granted, err := trySecondGrant(t, c, "k", time.Second, nil)
			if control {
				require.NoError(t, err, "control: node 0 trusted after it forgot the lease, nodes 0 and 2 grant k again")
				assert.Equal(t, []int{0, 2}, granted)
				assert.Positive(t, lease.Validity(), "while the first lease is valid")
				return
			}
			assert.False(t, r.trusted, "node 0 changed since the check: not all trusted")
			if err == nil {
				t.Fatalf("nodes %v granted k again while the first lease is valid for %v more", granted, lease.Validity())
			}
			require.Positive(t, lease.Validity(), "the first lease must still be valid for the check to mean anything")
			require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "node 0 keeps its quarantine")
		})
	}
}

// A genuinely new deployment (every node just started, no key) is trusted
// by TrustNewNodes whatever clock the Locker times its leases with: a
// Locker given Options.Clock (a clock.Fake set a year back, as tests and
// simulations do) examines the nodes on that clock, so whether a node is
// still in its first quarantine must be judged on the same clock, not on
// the wall clock.
func TestTrustNewNodesTrustsANewDeploymentWhateverTheLockersClock(t *testing.T) {
	for _, noQuarantine := range []bool{true, false} {
		t.Run(fmt.Sprintf("NoQuarantine=%v", noQuarantine), func(t *testing.T) {
			c := freshCluster(t, 3)
			fake := clock.NewFake(time.Now().Add(-365 * 24 * time.Hour))
			l := newLocker(t, c.nodes(nil), &redlock.Options{NoQuarantine: noQuarantine, Clock: fake})
			trusted, err := l.TrustNewNodes(t.Context())
			require.NoError(t, err)
			assert.True(t, trusted, "a new deployment, examined on the Locker's clock, is refused")
		})
	}
}

// Locker.TrustNewNodes in deployments in use (and what a QuorumError says
// about quarantined nodes). Each test builds a deployment that is in use
// (a lease is held, on a bare majority) where one node forgot the lease,
// and asserts that TrustNewNodes leaves that node quarantined, as its
// documentation promises: "once the deployment is in use it does nothing, so
// a node that restarted empty beside nodes that remember still waits out its
// quarantine". None of these deployments is the documented caveat (every
// node lost its memory at once): only node 0 forgot.

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
