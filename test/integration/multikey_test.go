package integration

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
)

// ownClients are clients of c's servers (through the same proxies) with
// pools of their own, as another process would have.
func ownClients(t *testing.T, c *harness.Cluster) []redlock.Node {
	out := make([]redlock.Node, len(c.Nodes))
	for i, n := range c.Nodes {
		cl := redis.NewClient(n.Client.Options())
		t.Cleanup(func() { cl.Close() })
		out[i] = cl
	}
	return out
}

// Overlapping key sets named in different orders, and single-key leases of
// one of the keys, on real servers from three Lockers with clients of their
// own: no key is ever held by two leases at once, every call returns before
// its deadline (there is no partial lease to deadlock on), and nothing is
// left on the nodes.
func TestMultiKeyContentionNeverDeadlocksNorOverlaps(t *testing.T) {
	c := harness.Start(t, harness.Options{Nodes: 3})
	opts := &redlock.Options{NodeTimeout: time.Second, RetryDelay: time.Millisecond, RetryJitter: 3 * time.Millisecond}
	lockers := []*redlock.Locker{newLockerOn(t, ownClients(t, c), opts), newLockerOn(t, ownClients(t, c), opts), newLockerOn(t, ownClients(t, c), opts)}
	sets := [][]string{{"it:a", "it:b"}, {"it:b", "it:a"}, {"it:b", "it:c"}, {"it:a", "it:b", "it:c"}, {"it:a"}}
	holders := map[string]*atomic.Int32{"it:a": {}, "it:b": {}, "it:c": {}}
	var overlaps, wins atomic.Int32
	const perCaller = 20
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			l, keys := lockers[g%len(lockers)], sets[g%len(sets)]
			for range perCaller {
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				var lease *redlock.Lease
				var err error
				if len(keys) == 1 {
					lease, err = l.Lock(ctx, keys[0], 5*time.Second)
				} else {
					lease, err = l.LockMulti(ctx, keys, 5*time.Second)
				}
				cancel()
				if err != nil {
					t.Errorf("%v: %v", keys, err)
					return
				}
				wins.Add(1)
				for _, k := range lease.Keys() {
					if holders[k].Add(1) > 1 {
						overlaps.Add(1)
					}
				}
				time.Sleep(200 * time.Microsecond)
				for _, k := range lease.Keys() {
					holders[k].Add(-1)
				}
				if err := lease.Unlock(t.Context()); err != nil {
					t.Errorf("unlock %v: %v", keys, err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d leases over overlapping key sets, %d overlaps", wins.Load(), overlaps.Load())
	assert.Zero(t, overlaps.Load(), "two leases held a key at once")
	assert.Equal(t, int32(6*perCaller), wins.Load())
	for _, l := range lockers {
		drain(t, l)
	}
	for _, k := range []string{"it:a", "it:b", "it:c"} {
		keys, err := c.Keys(t.Context(), k)
		require.NoError(t, err)
		for i, ks := range keys {
			assert.Empty(t, ks, "node %d keeps %s", i, k)
		}
	}
}

// A job runner's multi-key, fenced lease crosses as JSON to a worker: a
// Locker with clients of its own resumes it, runs it under Do past several
// TTLs (extending it there), while the nodes still show it held and a
// contender is refused; when Do returns the keys are gone everywhere and the
// handle is stale. A Locker over other servers refuses the handle.
func TestResumedLeaseIsExtendedAndReleasedElsewhere(t *testing.T) {
	c := harness.Start(t, harness.Options{Nodes: 3})
	opts := &redlock.Options{Fencing: true, NodeTimeout: time.Second}
	runner := newLockerOn(t, ownClients(t, c), opts)
	worker := newLockerOn(t, ownClients(t, c), opts)
	contender := newLockerOn(t, ownClients(t, c), opts)
	const ttl = 600 * time.Millisecond
	keys := []string{"it:{acct}:2", "it:{acct}:1"}

	lease, err := runner.TryLockMulti(t.Context(), keys, ttl)
	require.NoError(t, err)
	wire, err := json.Marshal(lease.Handle())
	require.NoError(t, err)
	var h redlock.Handle
	require.NoError(t, json.Unmarshal(wire, &h))

	resumed, err := worker.Resume(t.Context(), h)
	require.NoError(t, err)
	assert.Equal(t, lease.TokenOf("it:{acct}:1"), resumed.TokenOf("it:{acct}:1"))
	assert.LessOrEqual(t, resumed.Validity(), ttl)
	err = resumed.Do(t.Context(), ttl, func(ctx context.Context, held *redlock.Lease) error {
		deadline := time.Now().Add(4 * ttl) // past several TTLs: only the worker's extensions keep it
		for time.Now().Before(deadline) {
			// The runner's own copy ran out on its clock (it does not
			// extend), but the nodes still hold the lease: the worker's.
			seen, err := runner.Inspect(ctx, "it:{acct}:1")
			if err != nil {
				return err
			}
			if seen.Holder != lease.Value() {
				return errors.New("the nodes no longer hold the handed-over lease")
			}
			if _, err := contender.TryLock(ctx, "it:{acct}:1", ttl); !errors.Is(err, redlock.ErrNotObtained) {
				return errors.New("a contender was not refused: " + errString(err))
			}
			select {
			case <-time.After(ttl / 4):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return nil
	})
	require.NoError(t, err)
	drain(t, worker)
	for _, k := range keys {
		ks, err := c.Keys(t.Context(), k)
		require.NoError(t, err)
		for i := range ks {
			assert.Empty(t, ks[i], "node %d keeps %s", i, k)
		}
	}
	require.ErrorIs(t, lease.Check(t.Context()), redlock.ErrNotHeld)
	_, err = worker.Resume(t.Context(), h)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "a released lease's handle is stale")

	other := harness.Start(t, harness.Options{Nodes: 3})
	elsewhere := newLocker(t, other, opts)
	_, err = elsewhere.Resume(t.Context(), h)
	require.ErrorIs(t, err, redlock.ErrOtherNodes)
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// evalshaCalls is how many EVALSHA calls the server has run
// (INFO commandstats): the coordinator's scripts, counted by the server.
func evalshaCalls(t *testing.T, n *harness.Node) int {
	info, err := n.Admin.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			calls, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			require.NoError(t, err)
			return calls
		}
	}
	return 0
}

// Fenced acquisitions in steady state take one round trip, counted by the
// servers themselves: each fenced TryLock and Unlock cycle runs two scripts
// on every node (the acquisition and the release) and one token record on
// the node that issued the token (unawaited), never phase 2,
// and every acquisition reports FencedInOneRoundTrip. Phase 2 runs only
// when the majority that granted first disagrees, and one phase 2 brings
// lagging counters in step (see below).
func TestFencedAcquisitionsTakeOneRoundTripInSteadyState(t *testing.T) {
	c := harness.Start(t, harness.Options{Nodes: 5})
	events := &eventLog{}
	// Without the node guard: its examinations run a script of their own
	// now and then, which would blur the count of the lock's scripts.
	l := newLocker(t, c, &redlock.Options{Fencing: true, NodeTimeout: 300 * time.Millisecond, Observer: events, NoQuarantine: true})
	const key, cycles = "it:steady", 50
	cycle := func() {
		t.Helper()
		lease, err := l.TryLock(t.Context(), key, 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(t.Context()))
		drain(t, l)
	}
	// Warm records the scripts' digests, so that every cycle counted runs
	// them as EVALSHA (before a digest is known a script goes as EVAL).
	require.NoError(t, l.Warm(t.Context()))
	cycle() // warm-up: connections, script caches, the counter's first value
	before := make([]int, len(c.Nodes))
	for i, n := range c.Nodes {
		before[i] = evalshaCalls(t, n)
	}
	from := len(events.of(redlock.OpAcquire))
	for range cycles {
		cycle()
	}
	total := 0
	for i, n := range c.Nodes {
		ran := evalshaCalls(t, n) - before[i]
		total += ran
		assert.GreaterOrEqual(t, ran, 2*cycles, "node %d: scripts run in %d cycles", i, cycles)
	}
	assert.Equal(t, (2*len(c.Nodes)+1)*cycles, total, "an acquisition and a release on every node, and one token record, each cycle")
	details := func(from int) (one, two int) {
		for _, e := range events.of(redlock.OpAcquire)[from:] {
			switch e.Detail {
			case redlock.FencedInOneRoundTrip:
				one++
			case redlock.FencedInTwoRoundTrips:
				two++
			}
		}
		return one, two
	}
	one, two := details(from)
	t.Logf("steady state: %d fenced acquisitions, %d in one round trip, %d with phase 2", cycles, one, two)
	assert.Equal(t, cycles, one)
	assert.Zero(t, two)

	// Nodes 0 and 1 missed three increments (nodes 2, 3 and 4 are
	// raised by three: counters only grow, so missing increments is
	// falling behind, never going back). A fenced acquisition decides on
	// the first majority to answer: while that majority is in step it
	// takes one round trip and the lagging nodes stay behind; the first
	// time a lagging node is among it, one phase 2 raises every granting
	// node to the highest counter, and all five are in step again.
	counter := "{" + key + "}:fencing"
	for _, i := range []int{2, 3, 4} {
		require.NoError(t, c.Nodes[i].Admin.IncrBy(t.Context(), counter, 3).Err())
	}
	inStep := func() bool {
		first := c.Nodes[0].Admin.Get(t.Context(), counter).Val()
		for _, n := range c.Nodes[1:] {
			if n.Admin.Get(t.Context(), counter).Val() != first {
				return false
			}
		}
		return true
	}
	from = len(events.of(redlock.OpAcquire))
	rounds := 0
	for ; rounds < 40 && !inStep(); rounds++ {
		for i, n := range c.Nodes {
			before[i] = evalshaCalls(t, n)
		}
		cycle()
		_, two := details(len(events.of(redlock.OpAcquire)) - 1)
		total := 0
		for i, n := range c.Nodes {
			ran := evalshaCalls(t, n) - before[i]
			total += ran
			assert.GreaterOrEqual(t, ran, 2+two, "node %d: the acquisition, phase 2 where it ran, the release", i)
		}
		// Where phase 2 did not run, the node that issued the token ran
		// its record too.
		assert.Equal(t, (2+two)*len(c.Nodes)+1-two, total, "the acquisitions, phase 2 where it ran (else one token record), the releases")
	}
	require.True(t, inStep(), "counters not in step after %d acquisitions", rounds)
	one, two = details(from)
	t.Logf("counters lagging on two nodes of five: %d acquisitions until in step, %d with phase 2", one+two, two)
	assert.Equal(t, 1, two, "one phase 2 brings the counters in step")
	for range 3 {
		cycle()
	}
	one, two = details(from + rounds)
	assert.Equal(t, 3, one, "in step again: one round trip")
	assert.Zero(t, two)
}
