package guard

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/drift"
)

var threeNames = []string{"node 0 (a:1)", "node 1 (b:1)", "node 2 (c:1)"}

// requireDuplicateOf checks that err is node's vote failed as a duplicate
// of owner's.
func requireDuplicateOf(t *testing.T, err error, node, owner int) {
	t.Helper()
	require.ErrorIs(t, err, ErrDuplicateNode)
	var d *DuplicateError
	require.ErrorAs(t, err, &d)
	assert.Equal(t, node, d.Node)
	assert.Equal(t, owner, d.Of)
	assert.ErrorContains(t, err, threeNames[node])
	assert.ErrorContains(t, err, threeNames[owner])
}

func TestOneServerCountsForOneNode(t *testing.T) {
	for _, tt := range []struct {
		name string
		// steps, in order: a node claims the server, and whether its
		// vote is then judged (and counts if it may)
		claims []int
		votes  []bool
		owner  int
	}{
		{"the earlier first", []int{0, 1}, []bool{false, false}, 0},
		{"the later first, no vote yet: the earlier takes over", []int{1, 0}, []bool{false, false}, 0},
		{"the later first, its vote counted: it keeps the server", []int{1, 0}, []bool{true, false}, 1},
		{"the earlier first, its vote counted", []int{0, 1}, []bool{true, false}, 0},
		{"three nodes, the middle one voted first", []int{1, 2, 0}, []bool{true, false, false}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ids := NewIdentities(threeNames)
			claims := map[int]*claim{}
			for i, node := range tt.claims {
				claims[node] = ids.claim(node, "run-a")
				if tt.votes[i] {
					require.NoError(t, claims[node].counts(node))
				}
			}
			for node, c := range claims {
				if node == tt.owner {
					assert.NoError(t, c.counts(node))
					continue
				}
				requireDuplicateOf(t, c.counts(node), node, tt.owner)
			}
		})
	}
}

// Of two nodes that claim one server and vote at once, exactly one vote
// counts, however the steps interleave. (It once caught both counting, in
// one of 1,500 iterations beside two CPU burners: the lock-free check read
// the owner before the other node took over and counted; it now runs
// 5,000, about 0.4 s.)
func TestConcurrentClaimsCountOneVote(t *testing.T) {
	for range 5000 {
		ids := NewIdentities(threeNames)
		var (
			wg      sync.WaitGroup
			results [2]error
		)
		for node := range 2 {
			wg.Go(func() { results[node] = ids.claim(node, "run-a").counts(node) })
		}
		wg.Wait()
		counted := 0
		for _, err := range results {
			if err == nil {
				counted++
			} else {
				require.ErrorIs(t, err, ErrDuplicateNode)
			}
		}
		require.Equal(t, 1, counted, "results %v", results)
	}
}

// A node examined as another server gives its old one up: the lowest node
// still answering as it counts, and may be taken over again until it votes.
func TestReleasedServerGoesToTheLowestHolder(t *testing.T) {
	ids := NewIdentities(threeNames)
	c0, c1, c2 := ids.claim(0, "run-a"), ids.claim(1, "run-a"), ids.claim(2, "run-a")
	require.NoError(t, c0.counts(0))
	c0.release(0)
	assert.NoError(t, c1.counts(1))
	requireDuplicateOf(t, c2.counts(2), 2, 1)
	c1.release(1)
	c2.release(2)
	assert.Empty(t, ids.by, "no node answers as the server")
}

// A cluster node holds one master's server on every marker of its slots:
// it gives the server up only when no marker is examined as it.
func TestServerHeldOnSeveralMarkers(t *testing.T) {
	ids := NewIdentities(threeNames)
	g0 := New(Config{MaxTTL: time.Minute, Bound: drift.Default, Clock: clock.System{}, Cluster: true, Identities: ids, Node: 0})
	g1 := New(Config{MaxTTL: time.Minute, Bound: drift.Default, Clock: clock.System{}, Cluster: true, Identities: ids, Node: 1})
	claim := func(g *Guard, marker, server string) *claim {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.claimFor(marker, server)
	}
	a := claim(g0, slotMarker(1), "run-a@n1")
	require.Same(t, a, claim(g0, slotMarker(1), "run-a@n1"), "examined again as the same server")
	claim(g0, slotMarker(2), "run-a@n1")
	b := claim(g1, slotMarker(3), "run-a@n1")
	require.NoError(t, g0.Duplicate())
	requireDuplicateOf(t, g1.Duplicate(), 1, 0)

	claim(g0, slotMarker(1), "run-b@n2") // slot 1 moved to another master
	requireDuplicateOf(t, b.counts(1), 1, 0)
	claim(g0, slotMarker(2), "?") // the master that answers says no run_id
	assert.NoError(t, b.counts(1), "node 0 no longer answers as run-a")
	assert.NoError(t, g1.Duplicate())
	assert.Nil(t, claim(g0, slotMarker(4), "?"), "not compared")
}

// Without Identities (a Locker of one node) nothing is claimed.
func TestOneNodeComparesNothing(t *testing.T) {
	g := New(Config{MaxTTL: time.Minute, Bound: drift.Default, Clock: clock.System{}})
	g.mu.Lock()
	c := g.claimFor(markerKey, "run-a")
	g.mu.Unlock()
	assert.Nil(t, c)
	assert.NoError(t, g.Duplicate())
	assert.False(t, errors.Is(g.Current(g.now.Now()), ErrDuplicateNode))
}

// A node promoted by a release, and taken over again by the releasing node
// re-examined as the server, must not have a vote counted on the lock-free
// path too: counted can go true (the old owner's), false (the release) and
// true again (the re-claimer's) around the promoted node's read of the
// owner. Node 1 votes without pause while node 0, whose vote counted, gives
// the server up, claims it again and votes: at most one of them counts.
func TestReclaimAfterReleaseCountsOneVote(t *testing.T) {
	type round struct {
		c        *claim
		closed   atomic.Bool
		inflight atomic.Int32
		counted1 atomic.Bool
	}
	const voters = 6
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(voters + 2))
	var (
		cur  atomic.Pointer[round]
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	for range voters {
		wg.Go(func() {
			for !stop.Load() {
				r := cur.Load()
				if r == nil {
					continue
				}
				r.inflight.Add(1)
				if !r.closed.Load() && r.c.counts(1) == nil {
					r.counted1.Store(true)
				}
				r.inflight.Add(-1)
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	rounds, both := 0, 0
	for ; rounds < 2000 && time.Now().Before(deadline) && both == 0; rounds++ { // it failed within 1,519 rounds in each of five runs of the lock-free check
		ids := NewIdentities(threeNames)
		c := ids.claim(0, "run-a")
		ids.claim(1, "run-a")
		require.NoError(t, c.counts(0))
		r := &round{c: c}
		cur.Store(r)
		c.release(0)
		require.Same(t, c, ids.claim(0, "run-a"))
		err0 := c.counts(0)
		cur.Store(nil)
		r.closed.Store(true)
		for r.inflight.Load() > 0 {
			runtime.Gosched()
		}
		if err0 == nil && r.counted1.Load() {
			both++
		}
	}
	t.Logf("%d rounds", rounds)
	require.Zero(t, both, "node 0 and node 1 both counted for run-a")
}

// A server's claim given up by its only holder is forgotten, and the next
// node examined as it owns it afresh; a vote still judged by the old
// examination's claim must not count beside that node's.
func TestForgottenClaimCountsNoVote(t *testing.T) {
	ids := NewIdentities(threeNames)
	old := ids.claim(0, "run-a")
	require.NoError(t, old.counts(0))
	old.release(0) // node 0 examined as another server
	require.NoError(t, ids.claim(1, "run-a").counts(1))
	requireDuplicateOf(t, old.counts(0), 0, 1)
}
