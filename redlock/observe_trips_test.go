package redlock_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
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
