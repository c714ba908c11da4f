// Package integration proves the library's claims against real redis-server
// processes in Docker containers, with real faults. Run it through
// scripts/test.sh, which starts Docker and provides the image.
package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
)

func TestMain(m *testing.M) {
	harness.Setup()
	code := m.Run()
	fmt.Println(fenced.report())
	os.Exit(code)
}

// fenced counts the suite's fenced acquisitions by how many round trips
// they took (Event.Detail), whatever faults each test injected: how often
// phase 2 still runs (see docs/architecture.md, "Fencing tokens"). Every Locker of
// the suite reports to it (withTransport), besides its own Observer.
var fenced fencedCount

type fencedCount struct{ one, two atomic.Int64 }

func (f *fencedCount) report() string {
	one, two := f.one.Load(), f.two.Load()
	share := 0.0
	if one+two > 0 {
		share = 100 * float64(two) / float64(one+two)
	}
	return fmt.Sprintf("fenced acquisitions across the suite: %d, of which %d ran phase 2 (%.1f%%)", one+two, two, share)
}

// counting passes every event to next (if any), counting fenced
// acquisitions on the way.
type counting struct{ next redlock.Observer }

func (c counting) Observe(e redlock.Event) {
	if e.Op == redlock.OpAcquire && e.Err == nil {
		switch e.Detail {
		case redlock.FencedInOneRoundTrip:
			fenced.one.Add(1)
		case redlock.FencedInTwoRoundTrips:
			fenced.two.Add(1)
		}
	}
	if c.next != nil {
		c.next.Observe(e)
	}
}

// withTransport applies REDLOCK_TEST_TRANSPORT to opts: "direct" sets
// Options.NoAutoPipeline, so that scripts/test.sh can run the suite over both
// of the coordinator's transports.
func withTransport(opts *redlock.Options) *redlock.Options {
	var o redlock.Options
	if opts != nil {
		o = *opts
	}
	if os.Getenv("REDLOCK_TEST_TRANSPORT") == "direct" {
		o.NoAutoPipeline = true
	}
	if o.Fencing {
		o.Observer = counting{next: o.Observer}
	}
	return &o
}

func newLocker(t *testing.T, c *harness.Cluster, opts *redlock.Options) *redlock.Locker {
	t.Helper()
	return newLockerOn(t, c.Lockers(), opts)
}

// newLockerOn returns a Locker on nodes, drained when the test ends, after
// declaring the nodes trusted (see TrustNodes).
func newLockerOn(t *testing.T, nodes []redlock.Node, opts *redlock.Options) *redlock.Locker {
	t.Helper()
	l, err := redlock.New(nodes, withTransport(opts))
	require.NoError(t, err)
	// The suite's servers are new and hold no locks; the node guard's own
	// tests restart or flush nodes after this. A user whose ACL does not
	// allow it relies on a trusted Locker of the default user.
	tctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := l.TrustNodes(tctx); err != nil && !errors.Is(err, redlock.ErrNoPermission) {
		t.Fatalf("TrustNodes: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := l.Drain(ctx); err != nil {
			t.Errorf("Drain: %v", err)
		}
	})
	return l
}

// untrustingLocker is newLockerOn without TrustNodes: for tests of the node
// guard, whose nodes restarted or were flushed after they were trusted.
func untrustingLocker(t *testing.T, nodes []redlock.Node, opts *redlock.Options) *redlock.Locker {
	t.Helper()
	l, err := redlock.New(nodes, withTransport(opts))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := l.Drain(ctx); err != nil {
			t.Errorf("Drain: %v", err)
		}
	})
	return l
}

func drain(t *testing.T, l *redlock.Locker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, l.Drain(ctx))
}

// eventually polls cond every 10ms until it holds or limit passes.
func eventually(t *testing.T, limit time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		require.NoError(t, err, what)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// noKeys reports whether no node has a key matching pattern.
func noKeys(ctx context.Context, c *harness.Cluster, pattern string) func() (bool, error) {
	return func() (bool, error) {
		keys, err := c.Keys(ctx, pattern)
		if err != nil {
			return false, err
		}
		for _, k := range keys {
			if len(k) > 0 {
				return false, nil
			}
		}
		return true, nil
	}
}
