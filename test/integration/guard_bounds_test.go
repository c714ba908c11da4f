package integration

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
)

// hugeDeclared is the MaxTTL field (ms) that a Locker with MaxTTL
// math.MaxInt64 wrote in a marker before New bounded MaxTTL: what a node may
// still hold, or an operator may write by hand.
const hugeDeclared = int64(math.MaxInt64 / int64(time.Millisecond))

// declareOnNode writes node n's guard marker by hand, as a Locker that
// declared MaxTTL declared would have: its memory began at began (ms, the
// node's clock), on the node's current server process, with a new expiry
// (every write of the marker moves it, so that the guards examine it).
func declareOnNode(ctx context.Context, t *testing.T, n *harness.Node, began, declared int64) {
	t.Helper()
	writeMarker(ctx, t, n, strconv.FormatInt(began, 10), declared)
}

// A MaxTTL declared in the nodes' markers beyond MaxTTLLimit (a Locker that
// meant "no limit", before New bounded it) must not disarm the guard of
// other Lockers with the default-sized MaxTTL: a memory that began now is
// quarantined at first use, and after two of three nodes are flushed while
// one Locker holds a key, another Locker is not granted it. It counts as
// MaxTTLLimit, never as a quarantine that overflowed into the past.
// Control: the same Lockers without the guard (NoQuarantine) are granted at
// first use, and grant the held key a second time.
func TestDeclaredMaxTTLBeyondTheLimitKeepsTheQuarantine(t *testing.T) {
	ctx := t.Context()
	c := harness.Start(t, harness.Options{Nodes: 3})
	const ttl = 4 * time.Second
	opts := redlock.Options{NodeTimeout: time.Second, MaxTTL: ttl}
	unguarded := opts
	unguarded.NoQuarantine = true

	// First use of memories that began now, in markers declaring the huge
	// MaxTTL.
	for _, n := range c.Nodes {
		now, err := n.Admin.Time(ctx).Result()
		require.NoError(t, err)
		declareOnNode(ctx, t, n, now.UnixMilli(), hugeDeclared)
	}
	first := untrustingLocker(t, c.Lockers(), &opts)
	_, err := first.TryLock(ctx, "it:declared", ttl)
	require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "memories that began now, on first use")
	drain(t, first)
	// The attempt was decided by a majority: a node it did not wait for
	// may not have been examined.
	quarantined := 0
	for _, h := range first.Health() {
		if h.QuarantineLeft == 0 {
			continue
		}
		quarantined++
		require.Greater(t, h.QuarantineLeft, redlock.MaxTTLLimit-time.Hour, "%s: quarantined for MaxTTLLimit, the most a marker can ask", h.Name)
		require.LessOrEqual(t, h.QuarantineLeft, redlock.MaxTTLLimit+time.Hour, h.Name)
	}
	require.GreaterOrEqual(t, quarantined, 2, "a majority quarantined")
	control := untrustingLocker(t, c.Lockers(), &unguarded)
	lease, err := control.TryLock(ctx, "it:declared", ttl)
	require.NoError(t, err, "control: without the guard, granted at first use")
	require.NoError(t, lease.Unlock(ctx))
	drain(t, control)

	// Memories whole (they began long ago), still declaring the huge
	// MaxTTL: a holds the key; b has examined every node.
	for _, n := range c.Nodes {
		declareOnNode(ctx, t, n, 0, hugeDeclared)
	}
	a := untrustingLocker(t, c.Lockers(), &opts)
	b := untrustingLocker(t, c.Lockers(), &opts)
	held, err := a.TryLock(ctx, "it:declared:held", ttl)
	require.NoError(t, err)
	warm, err := b.TryLock(ctx, "it:declared:warm", ttl)
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))
	drain(t, a)
	drain(t, b)

	// Two nodes forget while a holds the key.
	for _, n := range c.Nodes[1:] {
		require.NoError(t, n.Admin.FlushAll(ctx).Err())
	}
	_, err = b.TryLock(ctx, "it:declared:held", ttl)
	require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "the flushed nodes must not grant a key held before they forgot")
	require.Greater(t, held.Validity(), time.Duration(0), "the test ran within the lease")
	drain(t, b)

	control = untrustingLocker(t, c.Lockers(), &unguarded)
	twice, err := control.TryLock(ctx, "it:declared:held", ttl)
	require.NoError(t, err, "control: without the guard the flushed nodes grant the held key a second time")
	require.Greater(t, held.Validity(), time.Duration(0), "control: both leases valid at once")
	require.NoError(t, twice.Unlock(ctx))
	// Its majority is gone: the flushed nodes forgot it.
	require.ErrorIs(t, held.Unlock(ctx), redlock.ErrNotHeld)
}

// A marker whose memory began ahead of the node's clock, however far (up
// to what a marker's field can say, and beyond int64), quarantines the
// node at first use: examine.lua must not rewrite a began it cannot format
// as an integer (string.format's %d of a number from 2^63 up gives
// math.MinInt64: a memory begun at the dawn of time, whole). Control: a
// memory that began long ago is granted at first use.
func TestMemoryThatBeganAheadOfTheNodesClockKeepsTheQuarantine(t *testing.T) {
	ctx := t.Context()
	c := harness.Start(t, harness.Options{Nodes: 3})
	const ttl = 4 * time.Second
	opts := redlock.Options{NodeTimeout: time.Second, MaxTTL: ttl}
	for i, tt := range []struct {
		name  string
		began func(now time.Time) string // the marker's first field
		whole bool
	}{
		{"control: long ago", func(time.Time) string { return "0" }, true},
		{"an hour ahead", func(now time.Time) string { return fmt.Sprint(now.Add(time.Hour).UnixMilli()) }, false},
		{"the largest int64", func(time.Time) string { return fmt.Sprint(int64(math.MaxInt64)) }, false},
		{"beyond int64", func(time.Time) string { return "99999999999999999999" }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, n := range c.Nodes {
				now, err := n.Admin.Time(ctx).Result()
				require.NoError(t, err)
				writeMarker(ctx, t, n, tt.began(now), ttl.Milliseconds())
			}
			l := untrustingLocker(t, c.Lockers(), &opts)
			key := fmt.Sprintf("it:ahead:%d", i)
			lease, err := l.TryLock(ctx, key, ttl)
			if tt.whole {
				require.NoError(t, err)
				require.NoError(t, lease.Unlock(ctx))
			} else {
				require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "a memory that began ahead of the node's clock counted at first use")
			}
			drain(t, l)
		})
	}
}

// writeMarker is declareOnNode with the began field as written (one no
// int64 holds, say).
func writeMarker(ctx context.Context, t *testing.T, n *harness.Node, began string, declared int64) {
	t.Helper()
	info, err := n.Admin.Info(ctx, "server").Result()
	require.NoError(t, err)
	_, rest, _ := strings.Cut(info, "run_id:")
	run := strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0])
	require.NotEmpty(t, run)
	const century = 100 * 365 * 24 * time.Hour
	expiry := time.Now().Add(century + rand.N(century)).UnixMilli()
	require.NoError(t, n.Admin.Do(ctx, "set", "redlock:memory", fmt.Sprintf("%s %s %d", began, run, declared), "pxat", expiry).Err())
}
