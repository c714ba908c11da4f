package redlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/redlock"
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
