package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
)

// The node guard on real servers, with no TrustNodes: nodes up for longer
// than MaxTTL without a marker (a first use) are quarantined for MaxTTL all
// the same, since a first use cannot be told for sure from a flush or an
// eviction (CONFIG RESETSTAT erases the counts that would tell); a FLUSHALL
// quarantines that node while the others carry the lock; the quarantine
// ends MaxTTL later. Restarts without persistence:
// TestNodeRestartWhileHeld.
func TestNodeGuardOnRealServers(t *testing.T) {
	ctx := t.Context()
	c := harness.Start(t, harness.Options{Nodes: 3})
	const maxTTL = 4 * time.Second
	opts := &redlock.Options{NodeTimeout: time.Second, MaxTTL: maxTTL}
	for _, n := range c.Nodes {
		eventually(t, 3*maxTTL, "the server up for longer than MaxTTL", func() (bool, error) {
			info, err := n.Admin.Info(ctx, "server").Result()
			if err != nil {
				return false, err
			}
			_, rest, _ := strings.Cut(info, "uptime_in_seconds:")
			up, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
			return time.Duration(up)*time.Second > maxTTL+time.Second, nil
		})
	}
	l := untrustingLocker(t, c.Lockers(), opts)
	firstUse := time.Now()
	_, err := l.TryLock(ctx, "it:guard", maxTTL)
	require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "nodes without a marker, however long they have run")
	drain(t, l)
	var lease *redlock.Lease
	eventually(t, 3*maxTTL, "the first use's quarantine ends", func() (bool, error) {
		lease, err = l.TryLock(ctx, "it:guard", maxTTL)
		return err == nil, nil
	})
	require.GreaterOrEqual(t, time.Since(firstUse), maxTTL-time.Second, "the first use's quarantine lasted MaxTTL")
	require.NoError(t, lease.Unlock(ctx))
	// Settled before the count begins: the first release's EVALSHA may meet
	// an empty script cache (NOSCRIPT), and a SET batched behind it would
	// run again with it, counted twice against one set of companions.
	drain(t, l)

	// In the steady state the guard's companions are PTTL of its marker and
	// SCRIPT EXISTS of its proof: the node's commands, counted by the
	// server itself, show no TIME.
	// Each cycle is drained before the next: TryLock and Unlock return on a
	// majority, and a slow node's batch could otherwise carry one cycle's
	// SET and the next one's behind a single set of companions.
	require.NoError(t, c.Nodes[1].Admin.ConfigResetStat(ctx).Err())
	for range 20 {
		lease, err := l.TryLock(ctx, "it:guard", maxTTL)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(ctx))
		drain(t, l)
	}
	stats, err := c.Nodes[1].Admin.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	require.NotContains(t, stats, "cmdstat_time:", "TIME in the steady state")
	require.NotContains(t, stats, "cmdstat_pexpiretime:", "an examination in the steady state")
	calls := func(cmd string) int {
		_, rest, _ := strings.Cut(stats, "cmdstat_"+cmd+":calls=")
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		return n
	}
	// An acquisition decided before its SET left for this node is withdrawn
	// there, unsent: count the SETs the node ran.
	require.Positive(t, calls("set"))
	require.GreaterOrEqual(t, calls("pttl"), calls("set"), "PTTL after each acquisition: %s", stats)
	require.GreaterOrEqual(t, calls("script|exists"), calls("set"), "SCRIPT EXISTS after each acquisition: %s", stats)
	for _, h := range l.Health() {
		require.Equal(t, redlock.ClockByExpiry, h.ClockReadBy, h.Name)
	}

	require.NoError(t, c.Nodes[0].Admin.FlushAll(ctx).Err())
	lease, err = l.TryLock(ctx, "it:guard", maxTTL)
	require.NoError(t, err, "two of three nodes carry the lock")
	drain(t, l)
	require.Equal(t, 2, lease.Holders(), "the flushed node's grant does not count")
	require.NoError(t, lease.Unlock(ctx))
	drain(t, l) // Unlock returns on a majority: the release on node 0, where the uncounted grant set the key
	alone := untrustingLocker(t, c.Lockers()[:1], opts)
	flushed := time.Now()
	_, err = alone.TryLock(ctx, "it:guard", maxTTL)
	require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "the flushed node")
	require.NotErrorIs(t, err, redlock.ErrNotObtained)
	eventually(t, 3*maxTTL, "the quarantine ends", func() (bool, error) {
		lease, err := alone.TryLock(ctx, "it:guard", maxTTL)
		if err != nil {
			return false, nil
		}
		return true, lease.Unlock(ctx)
	})
	require.GreaterOrEqual(t, time.Since(flushed), maxTTL-time.Second, "the quarantine lasted MaxTTL")
}

// Healing on real servers: a Do lasting several TTLs survives a rolling
// restart without persistence of all five nodes, one at a time, each restart
// after the previous node rejoined (out of quarantine, and holding the lease
// again). Without healing (NoHeal, the negative control) the third restart
// leaves a bare minority and the same run loses the lease.
func TestRollingRestartHeals(t *testing.T) {
	for _, heal := range []bool{true, false} {
		t.Run(map[bool]string{true: "healing", false: "NoHeal"}[heal], func(t *testing.T) {
			c := harness.Start(t, harness.Options{})
			const ttl, maxTTL = 2 * time.Second, 3 * time.Second
			l := newLocker(t, c, &redlock.Options{NodeTimeout: time.Second, MaxTTL: maxTTL, NoHeal: !heal})
			var held []int // nodes holding the lease once each restarted node rejoined
			err := l.Do(t.Context(), "it:rolling", ttl, func(ctx context.Context, lease *redlock.Lease) error {
				for i, n := range c.Nodes {
					if err := n.Restart(ctx); err != nil {
						return err
					}
					rejoined := false
					deadline := time.Now().Add(maxTTL + 4*ttl)
					for !rejoined && time.Now().Before(deadline) && ctx.Err() == nil {
						time.Sleep(50 * time.Millisecond)
						v, _ := n.Admin.Get(ctx, "it:rolling").Result()
						rejoined = v == lease.Value() && lease.Holders() == len(c.Nodes)
					}
					if ctx.Err() != nil {
						return ctx.Err()
					}
					t.Logf("node %d restarted; rejoined: %v; %d nodes hold the lease", i, rejoined, lease.Holders())
					held = append(held, lease.Holders())
				}
				return nil
			})
			if !heal {
				require.ErrorIs(t, err, redlock.ErrLost, "the negative control: without healing the lease ends")
				return
			}
			require.NoError(t, err)
			require.Equal(t, []int{5, 5, 5, 5, 5}, held)
		})
	}
}

// Under load (16 clients, 30 s, 16 keys) on real servers, the node guard
// raises no false alarm: no quarantine, no clock jump, and the clocks it
// measures (from its marker's expiry, in milliseconds) run within the drift
// bound.
func TestNodeGuardUnderLoad(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	l := newLocker(t, c, &redlock.Options{NodeTimeout: time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var cycles, quarantines, other atomic.Int64
	var wg sync.WaitGroup
	for k := range 16 {
		wg.Go(func() {
			key := fmt.Sprintf("it:load:%d", k)
			for ctx.Err() == nil {
				lease, err := l.TryLock(ctx, key, 10*time.Second)
				switch {
				case errors.Is(err, redlock.ErrNodeQuarantined):
					quarantines.Add(1)
					t.Errorf("a false quarantine: %v", err)
				case err != nil:
					if ctx.Err() == nil {
						other.Add(1)
					}
				default:
					cycles.Add(1)
					_ = lease.Unlock(context.WithoutCancel(ctx))
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d cycles, %d quarantined attempts, %d other errors", cycles.Load(), quarantines.Load(), other.Load())
	require.Positive(t, cycles.Load())
	for _, h := range l.Health() {
		t.Logf("%s: rtt %v, failures %d, clock %+.1f±%.1f ppm (measured %v), %d readings, %d jumps", h.Name, h.RTT, h.Failures, h.ClockRatePPM, h.ClockRateErrPPM, h.ClockMeasured, h.ClockSamples, h.ClockJumps)
		require.Zero(t, h.ClockJumps, h.Name)
		require.Zero(t, h.QuarantineLeft, h.Name)
		require.Positive(t, h.ClockSamples, h.Name)
		require.Equal(t, redlock.ClockByExpiry, h.ClockReadBy, h.Name)
		if h.ClockMeasured {
			require.Less(t, math.Abs(h.ClockRatePPM)-h.ClockRateErrPPM, 10000.0, "%s: a clock outside the 1%% bound", h.Name)
		}
	}
}
