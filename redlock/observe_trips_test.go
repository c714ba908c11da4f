package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tripRecorder is a RoundTripObserver that keeps every round trip (and
// every event, through recorder).
type tripRecorder struct {
	recorder
	tripsMu sync.Mutex
	trips   []redlock.RoundTrip
}

func (r *tripRecorder) ObserveRoundTrip(t redlock.RoundTrip) {
	r.tripsMu.Lock()
	defer r.tripsMu.Unlock()
	r.trips = append(r.trips, t)
}

// to returns the round trips to node i, in the order observed.
func (r *tripRecorder) to(i int) []redlock.RoundTrip {
	return matching(&r.tripsMu, &r.trips, func(t redlock.RoundTrip) bool { return t.Node == i })
}

// Every round trip reaches a RoundTripObserver, on both transports: what
// it carried, how long it took, how it failed.
func TestRoundTripsReachTheObserver(t *testing.T) {
	for _, tc := range []struct {
		name   string
		direct bool
	}{{"pipeline", false}, {"direct", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			rec := &tripRecorder{}
			l, err := redlock.New(c.nodes(nil), &redlock.Options{Observer: rec, NodeTimeout: 2 * time.Second, NoAutoPipeline: tc.direct})
			require.NoError(t, err)
			lease, err := l.TryLock(t.Context(), "k", 10*time.Second)
			require.NoError(t, err)
			require.NoError(t, lease.Unlock(t.Context()))
			drain(t, l)
			for i := range 3 {
				trips := rec.to(i)
				var commands []string
				for _, trip := range trips {
					commands = append(commands, trip.Command)
					assert.Equal(t, 1, trip.Commands, "one operation at a time: one command a trip")
					assert.Positive(t, trip.Duration)
					assert.NoError(t, trip.Err, "SET's nil reply is a grant, not a failure")
					assert.Equal(t, fmt.Sprintf("node %d (%s)", i, c.servers[i].Addr()), trip.Name)
				}
				assert.Equal(t, []string{"set", "evalsha"}, commands, "node %d: the acquisition, then the unlock", i)
			}

			c.servers[2].Close()
			_, err = l.TryLock(t.Context(), "k2", 10*time.Second)
			require.NoError(t, err, "two of three nodes grant")
			drain(t, l)
			require.Eventually(t, func() bool { return len(rec.to(2)) == 3 }, 10*time.Second, 10*time.Millisecond, "the closed node's trip is reported")
			failed := rec.to(2)[2]
			assert.Equal(t, "set", failed.Command)
			assert.Error(t, failed.Err, "a closed node: the trip failed")
			if errors.Is(failed.Err, quorum.ErrNoReply) { // go-redis dialed again until the call's time ran out
				// The NodeTimeout runs from the round's start, a moment
				// before this trip's send: the trip ends at it, so it
				// lasts a hair less.
				assert.InDelta(t, 2*time.Second, failed.Duration, float64(100*time.Millisecond), "no reply: the trip lasts the NodeTimeout")
			}
		})
	}
}

// A pipeline's batch is one round trip, however many commands it carries;
// and a node the decision did not wait for still reports its round trips.
func TestARoundTripCarriesABatch(t *testing.T) {
	const away = 60 * time.Millisecond
	c := newCluster(t, 3)
	proxies, nodes := c.proxied(t)
	proxies[0].SetDelay(0, away)
	rec := &tripRecorder{}
	l, err := redlock.New(nodes, &redlock.Options{Observer: rec, NodeTimeout: 5 * time.Second})
	require.NoError(t, err)
	const clients = 8
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			lease, err := l.TryLock(t.Context(), fmt.Sprintf("k%d", i), 10*time.Second)
			if assert.NoError(t, err) {
				assert.NoError(t, lease.Unlock(t.Context()))
			}
		})
	}
	wg.Wait()
	drain(t, l)
	carried := func() (sum, most int) {
		for _, trip := range rec.to(0) {
			sum += trip.Commands
			most = max(most, trip.Commands)
			assert.NoError(t, trip.Err)
			assert.GreaterOrEqual(t, trip.Duration, away, "node 0 is %v away", away)
		}
		return sum, most
	}
	require.Eventually(t, func() bool { sum, _ := carried(); return sum == 2*clients }, 10*time.Second, 10*time.Millisecond,
		"node 0's trips carry every SET and unlock, though the decisions did not wait for it")
	_, most := carried()
	assert.Greater(t, most, 1, "commands queued behind a batch in flight go together")
	late := 0
	for _, e := range rec.of(redlock.OpAcquire) {
		if e.Nodes[0].Latency == 0 {
			late++
		}
	}
	assert.Positive(t, late, "some decisions did not wait for node 0: their events have no latency for it, its round trips do")
}

// A RoundTripObserver that panics breaks nothing: the replies are
// delivered, the lock is taken and released.
func TestPanickingRoundTripObserver(t *testing.T) {
	for _, direct := range []bool{false, true} {
		c := newCluster(t, 3)
		l, err := redlock.New(c.nodes(nil), &redlock.Options{Observer: panickingTrips{}, NodeTimeout: 2 * time.Second, NoAutoPipeline: direct})
		require.NoError(t, err)
		lease, err := l.TryLock(t.Context(), "k", 10*time.Second)
		require.NoError(t, err, "direct %v", direct)
		require.NoError(t, lease.Unlock(t.Context()))
		drain(t, l)
		for _, m := range c.servers {
			assert.Empty(t, lockKeys(m))
		}
	}
}

type panickingTrips struct{}

func (panickingTrips) Observe(redlock.Event)              {}
func (panickingTrips) ObserveRoundTrip(redlock.RoundTrip) { panic("observer bug") }

// A direct call's trip reports ErrNoReply (ErrNodeTimeout, "no reply ... in
// time (NodeTimeout)") only when the call's own time ran out: a caller
// whose context ends first gets its own context's error, as its vote does.
// (tripError once converted every deadline.)
func TestDirectTripTellsTheCallersDeadlineFromTheNodeTimeout(t *testing.T) {
	c := newCluster(t, 3)
	nodes := c.nodes(func(_ int, n redlock.Node) redlock.Node {
		// A node that does not answer: the call ends with its context.
		return &hookNode{Node: n, beforeDo: func(ctx context.Context, _ []any) error { <-ctx.Done(); return ctx.Err() }}
	})
	rec := &tripRecorder{}
	l, err := redlock.New(nodes, &redlock.Options{Observer: rec, NodeTimeout: 5 * time.Second, NoAutoPipeline: true})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = l.TryLock(ctx, "k", 10*time.Second)
	require.Error(t, err)
	drain(t, l)
	require.Eventually(t, func() bool { return len(rec.to(0)) > 0 }, 10*time.Second, 10*time.Millisecond)
	trip := rec.to(0)[0]
	t.Logf("trip: %+v", trip)
	if ev := rec.of(redlock.OpAcquire); len(ev) > 0 {
		t.Logf("the vote's own error for node 0: %v", ev[0].Nodes[0].Err)
	}
	require.Error(t, trip.Err)
	assert.Less(t, trip.Duration, 5*time.Second, "the call ended with the caller's context")
	assert.NotErrorIs(t, trip.Err, quorum.ErrNoReply,
		"the caller's deadline is reported as the node's timeout (%v) after %v", trip.Err, trip.Duration)
}

// goexitTrips ends the goroutine that calls it, once: as t.FailNow or
// require.* inside an observer would (runtime.Goexit is not a panic, and
// observeTrip's recover does not stop it).
type goexitTrips struct {
	recorder
	once sync.Once
}

func (g *goexitTrips) ObserveRoundTrip(t redlock.RoundTrip) {
	if t.Node == 0 {
		g.once.Do(runtime.Goexit)
	}
}

// A RoundTripObserver that ends its goroutine (Goexit, e.g. a test's
// require inside it) ends the pipeline's sender, but not the pipeline: the
// batch's replies are delivered, its keys let go, and a new sender sends
// what is queued (the release behind it, later locks). Once the replies
// were never delivered, the release never sent, and Drain hung.
func TestGoexitInRoundTripObserverDoesNotStrandThePipeline(t *testing.T) {
	c := newCluster(t, 3)
	obs := &goexitTrips{}
	// Generous times: a node's first examination on a loaded machine takes
	// a while, and the failure this test looks for is a Drain that never
	// returns.
	l, err := redlock.New(c.nodes(nil), &redlock.Options{Observer: obs, NodeTimeout: 2 * time.Second})
	require.NoError(t, err)
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err, "two nodes carry the lock")
	require.NoError(t, lease.Unlock(t.Context()))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	drainErr := l.Drain(ctx)
	assert.NoError(t, drainErr, "Drain: node 0's reply was never delivered")
	assert.Empty(t, lockKeys(c.servers[0]), "node 0 keeps the released lock")
	// A later lock on the key through the same Locker: node 0's pipeline
	// must still send it (a new sender took over the queue).
	if l2, err := l.TryLock(t.Context(), "k", time.Minute); assert.NoError(t, err) {
		require.NoError(t, l.Drain(ctx))
		assert.Equal(t, 3, l2.Holders(), "node 0's pipeline sends on, and it no longer holds the first lease's key")
		_ = l2.Unlock(t.Context())
	}
}

var _ = errors.New

// sleepyTrips sleeps in every round trip to node 0.
type sleepyTrips struct {
	tripRecorder
	sleep time.Duration
}

func (s *sleepyTrips) ObserveRoundTrip(t redlock.RoundTrip) {
	s.tripRecorder.ObserveRoundTrip(t)
	if t.Node == 0 {
		time.Sleep(s.sleep)
	}
}

// Health's round-trip stats for a pipeline are the batch's first trip,
// taken before the observer runs: a slow RoundTripObserver does not show
// in them. Were the sleep counted, every trip to node 0, and its RTT, would
// take at least the sleep: that is the bound (a loaded machine under the
// race detector has taken over 400 ms for a trip).
func TestHealthRTTExcludesASlowRoundTripObserver(t *testing.T) {
	const sleep = time.Second
	c := newCluster(t, 3)
	obs := &sleepyTrips{sleep: sleep}
	l, err := redlock.New(c.nodes(nil), &redlock.Options{Observer: obs, NodeTimeout: 5 * time.Second})
	require.NoError(t, err)
	for range 2 {
		lease, err := l.TryLock(t.Context(), "k", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(t.Context()))
	}
	drain(t, l)
	h := l.Health()
	require.Positive(t, h[0].RTT)
	assert.Less(t, h[0].RTT, sleep, "node 0's RTT counts the observer's sleep")
	for _, trip := range obs.to(0) {
		assert.Less(t, trip.Duration, sleep, "a trip's Duration counts the observer's sleep")
	}
}

// After the node lost its script cache, the pipeline resends the unlock
// as EVAL; the round trip still says evalsha, carries one command and no
// error (the rerun got its reply).
func TestANoScriptRerunIsReportedAsSent(t *testing.T) {
	c := newCluster(t, 1)
	rec := &tripRecorder{}
	l, err := redlock.New(c.nodes(nil), &redlock.Options{Observer: rec, NodeTimeout: 5 * time.Second})
	require.NoError(t, err)
	lease, err := l.TryLock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.clients[0].ScriptFlush(t.Context()).Err())
	require.NoError(t, lease.Unlock(t.Context()))
	drain(t, l)
	assert.Empty(t, lockKeys(c.servers[0]))
	trips := rec.to(0)
	require.Len(t, trips, 2)
	assert.Equal(t, "evalsha", trips[1].Command, "the name as sent, though the rerun went as EVAL")
	assert.Equal(t, 1, trips[1].Commands)
	assert.NoError(t, trips[1].Err, "NOSCRIPT then a reply: every command got one")
	assert.GreaterOrEqual(t, trips[1].Duration, time.Duration(0))
}

// On the direct transport a release the Locker skips (the node refused
// the SET) is not a round trip.
func TestASkippedDirectCallIsNotARoundTrip(t *testing.T) {
	c := newCluster(t, 3)
	c.setOther(t, "k", 1, 2)
	rec := &tripRecorder{}
	l, err := redlock.New(c.nodes(nil), &redlock.Options{Observer: rec, NodeTimeout: 5 * time.Second, NoAutoPipeline: true})
	require.NoError(t, err)
	_, err = l.TryLock(t.Context(), "k", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	drain(t, l)
	assert.Empty(t, lockKeys(c.servers[0]), "node 0's grant released")
	var names []string
	for _, trip := range rec.to(0) {
		names = append(names, trip.Command)
	}
	assert.Equal(t, []string{"set", "evalsha"}, names, "node 0: the SET and its release")
	for i := 1; i <= 2; i++ {
		require.Len(t, rec.to(i), 1, "node %d: the refused SET only; its release was skipped", i)
		assert.NoError(t, rec.to(i)[0].Err, "a refusal is a reply")
	}
}

// Under concurrency on the pipeline, an observer that panics on every
// trip loses no reply and leaves no lock.
func TestAPanickingRoundTripObserverUnderLoadLosesNoReply(t *testing.T) {
	c := newCluster(t, 3)
	proxies, nodes := c.proxied(t)
	proxies[1].SetDelay(0, 5*time.Millisecond)
	l, err := redlock.New(nodes, &redlock.Options{Observer: panickingTrips{}, NodeTimeout: 5 * time.Second})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var granted atomic.Int32
	for i := range 16 {
		wg.Go(func() {
			for j := range 5 {
				key := "k" + string(rune('a'+(i+j)%4))
				lease, err := l.Lock(t.Context(), key, 10*time.Second)
				if assert.NoError(t, err) {
					granted.Add(1)
					assert.NoError(t, lease.Unlock(t.Context()))
				}
			}
		})
	}
	wg.Wait()
	drain(t, l)
	assert.EqualValues(t, 80, granted.Load())
	for i, m := range c.servers {
		for _, k := range lockKeys(m) {
			if len(k) > 0 && k[0] == 'k' && len(k) == 2 {
				t.Errorf("node %d keeps %s", i, k)
			}
		}
	}
}
