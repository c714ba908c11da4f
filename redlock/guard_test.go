package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/internal/hashtag"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock"
)

// quarantined checks that err is a quarantine, reported as such and never
// as contention, with a *QuorumError that names the cause.
func quarantined(t *testing.T, err error, cause string) {
	t.Helper()
	require.ErrorIs(t, err, redlock.ErrNodeQuarantined)
	require.NotErrorIs(t, err, redlock.ErrNotObtained, "a quarantine reported as contention")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	require.Contains(t, err.Error(), cause)
}

const memoryCause = "more: its memory began less than MaxTTL ago"

// The node guard's restart check on in-process servers. miniredis has no
// INFO server, so to the guard a miniredis whose marker is missing began its
// memory now (the safe reading of an unknown uptime).
func TestNodeGuard(t *testing.T) {
	ctx := t.Context()
	fresh := func(t *testing.T, n int) *cluster {
		c := newCluster(t, n)
		for _, m := range c.servers {
			m.Del("redlock:memory") // as a new server: no marker
		}
		return c
	}

	t.Run("a new node is quarantined until TrustNodes", func(t *testing.T) {
		c := fresh(t, 3)
		l := newLocker(t, c.nodes(nil), nil)
		_, err := l.TryLock(ctx, "k", time.Second)
		quarantined(t, err, memoryCause)
		require.Contains(t, err.Error(), "node 0 (")
		require.Contains(t, err.Error(), "quarantined for 1m0.6", "the whole MaxTTL is left, and the drift bound on top")
		drain(t, l)
		for i, m := range c.servers {
			assert.Empty(t, lockKeys(m), "node %d: a grant that did not count is released", i)
		}
		for i, h := range l.Health() {
			assert.Greater(t, h.QuarantineLeft, 59*time.Second, "node %d", i)
			assert.Contains(t, h.QuarantineCause, "memory began", "node %d", i)
		}

		require.NoError(t, l.TrustNodes(ctx))
		for i, h := range l.Health() {
			assert.Zero(t, h.QuarantineLeft, "node %d after TrustNodes", i)
		}
		lease, err := l.TryLock(ctx, "k", time.Second)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(ctx))
		other := newLocker(t, c.nodes(nil), nil)
		lease, err = other.TryLock(ctx, "k", time.Second)
		require.NoError(t, err, "TrustNodes lifts the quarantine for every Locker")
		require.NoError(t, lease.Unlock(ctx))
	})

	t.Run("the quarantine ends MaxTTL after the memory began", func(t *testing.T) {
		c := fresh(t, 1)
		// This process's clock, stopped and moved by the test. The
		// node's keeps time (moving it too would be a clock jump), and
		// Warm loads the scripts, so that no NOSCRIPT (a new process,
		// which the guard would examine afresh) falls on the attempts.
		fake := clock.NewFake(time.Now())
		advance := fake.Advance
		l := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: 10 * time.Second, Clock: fake})
		require.NoError(t, l.Warm(ctx))
		_, err := l.TryLock(ctx, "k", time.Second)
		quarantined(t, err, memoryCause)
		advance(9 * time.Second)
		_, err = l.TryLock(ctx, "k", time.Second)
		quarantined(t, err, "quarantined for 1.1") // 1 s, and the drift bound of 10 s
		advance(1200 * time.Millisecond)
		lease, err := l.TryLock(ctx, "k", time.Second)
		require.NoError(t, err, "MaxTTL, and its drift bound, after the memory began")
		require.NoError(t, lease.Unlock(ctx))
	})

	t.Run("FLUSHALL quarantines the node; the others carry the lock", func(t *testing.T) {
		c := newCluster(t, 3)
		l := newLocker(t, c.nodes(nil), nil)
		lease, err := l.TryLock(ctx, "k", time.Second) // every node examined
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(ctx))
		c.servers[0].FlushAll()
		lease, err = l.TryLock(ctx, "k", time.Second)
		require.NoError(t, err, "two of three nodes")
		require.Equal(t, 2, lease.Holders(), "the flushed node's grant does not count")
		require.NoError(t, lease.Unlock(ctx))
		drain(t, l) // the release on node 0, where the grant that did not count set the key
		alone := newLocker(t, c.nodes(nil)[:1], nil)
		_, err = alone.TryLock(ctx, "k", time.Second)
		quarantined(t, err, memoryCause)
	})

	t.Run("NoQuarantine grants; a guarded Locker still refuses", func(t *testing.T) {
		c := fresh(t, 3)
		l := newLocker(t, c.nodes(nil), &redlock.Options{NoQuarantine: true})
		lease, err := l.TryLock(ctx, "k", time.Second)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(ctx))
		guarded := newLocker(t, c.nodes(nil), nil)
		_, err = guarded.TryLock(ctx, "k", time.Second)
		quarantined(t, err, memoryCause)
	})

	t.Run("a script cache emptied sends the guard to look again", func(t *testing.T) {
		c := newCluster(t, 1)
		var examined atomic.Int32
		l := newLocker(t, c.nodes(func(_ int, n redlock.Node) redlock.Node {
			return &examineCounter{Node: n, n: &examined}
		}), &redlock.Options{Fencing: true})
		cycle := func() {
			t.Helper()
			lease, err := l.TryLock(ctx, "k", time.Second)
			require.NoError(t, err)
			require.NoError(t, lease.Unlock(ctx))
		}
		cycle()
		cycle()
		require.EqualValues(t, 1, examined.Load(), "examined on first use only")

		// The same process (its run_id unchanged): a SCRIPT FLUSH, not a
		// restart. Examined, and still trusted.
		require.NoError(t, c.clients[0].ScriptFlush(ctx).Err())
		cycle()
		require.EqualValues(t, 2, examined.Load(), "SCRIPT EXISTS said the cache is new")

		// A marker another process wrote, on a node that cannot say it
		// kept its memory (no AOF, no word on what it loaded): it is
		// treated as restarted from a snapshot, its memory begun now.
		require.NoError(t, c.servers[0].Set("redlock:memory", "0 0123456789abcdef"))
		_, err := l.TryLock(ctx, "k", time.Second)
		quarantined(t, err, memoryCause)
		v, _ := c.servers[0].Get("redlock:memory")
		require.Regexp(t, `^\d+ \? \d+ \? 0 0 0 0$`, v, "the marker now names this run, and the MaxTTL")
	})

	t.Run("a TTL above MaxTTL never reaches a node", func(t *testing.T) {
		c := newCluster(t, 3)
		l := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: time.Second})
		_, err := l.TryLock(ctx, "k", 2*time.Second)
		require.ErrorContains(t, err, "longer than Options.MaxTTL")
		require.False(t, errors.Is(err, redlock.ErrNodeQuarantined))
	})

	t.Run("Warm examines the node", func(t *testing.T) {
		c := newCluster(t, 1)
		require.NoError(t, c.servers[0].Set("redlock:memory", "0 0123456789abcdef"))
		l := newLocker(t, c.nodes(nil), nil)
		require.NoError(t, l.Warm(ctx))
		v, _ := c.servers[0].Get("redlock:memory")
		require.Regexp(t, `^\d+ \? \d+ \? 0 0 0 0$`, v, "Warm examined the node")
		require.Positive(t, l.Health()[0].QuarantineLeft)
	})
}

// examineCounter counts the node guard's examinations that reach a node.
type examineCounter struct {
	redlock.Node
	n *atomic.Int32
}

// EvalSha counts an examination that ran: NOSCRIPT is followed by an Eval.
func (e *examineCounter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd := e.Node.EvalSha(ctx, sha, keys, args...)
	if keys[0] == "redlock:memory" && !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		e.n.Add(1)
	}
	return cmd
}

func (e *examineCounter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if keys[0] == "redlock:memory" {
		e.n.Add(1)
	}
	return e.Node.Eval(ctx, script, keys, args...)
}

// nodeClock is a node's clock for TIME (a miniredis pre-hook): it follows
// this process's clock, and a test can make it jump or run fast. A jump
// expires the node's keys early only where the test does so too
// (FastForward), as Redis would.
//
// byExpiry makes the node look to the guard as a Redis server does: it says
// its uptime (INFO server), and its keys' TTLs run by this process's clock
// (ClockTTL), so that the guard reads its clock from its marker's expiry
// (redlock.ClockByExpiry). Otherwise the node has no INFO and the guard
// reads TIME (redlock.ClockByTime).
type nodeClock struct {
	*clock.Fake
	mu   sync.Mutex
	seen map[string]int // commands by name, lower case; examine: the guard's examine script
}

// count returns how many name commands the node saw since the last reset.
func (nc *nodeClock) count(name string) int {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return nc.seen[name]
}

func (nc *nodeClock) reset() {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	clear(nc.seen)
}

func newNodeClock(c *cluster, i int, byExpiry bool) *nodeClock {
	nc := &nodeClock{Fake: clock.NewFakeFollowing(clock.System{}, time.Now()), seen: map[string]int{}}
	nc.Resume()
	m := c.servers[i]
	if byExpiry {
		m.ClockTTL(true)
	}
	m.Server().SetPreHook(func(p *server.Peer, cmd string, args ...string) bool {
		name := strings.ToLower(cmd)
		switch {
		case (name == "evalsha" || name == "eval") && len(args) > 2 && args[2] == "redlock:memory":
			name = "examine"
		case name == "get" && len(args) == 1 && args[0] == "redlock:memory":
			name = "get marker"
		}
		nc.mu.Lock()
		nc.seen[name]++
		nc.mu.Unlock()
		switch {
		case strings.EqualFold(cmd, "time"):
			now := nc.Now()
			p.WriteLen(2)
			p.WriteBulk(strconv.FormatInt(now.Unix(), 10))
			p.WriteBulk(strconv.FormatInt(int64(now.Nanosecond()/1000), 10))
			return true
		case byExpiry && strings.EqualFold(cmd, "info") && len(args) == 1 && strings.EqualFold(args[0], "server"):
			p.WriteBulk("# Server\r\nrun_id:" + runIDOf(i) + "\r\nuptime_in_seconds:3600\r\n")
			return true
		}
		return false
	})
	return nc
}

// onEachTransport runs test over the auto-pipeline and over the direct
// transport, with the Options that pick each.
func onEachTransport(t *testing.T, test func(t *testing.T, opts *redlock.Options)) {
	t.Run("auto-pipeline", func(t *testing.T) { test(t, &redlock.Options{}) })
	t.Run("direct", func(t *testing.T) { test(t, &redlock.Options{NoAutoPipeline: true}) })
}

// lockCycles takes and releases key n times, one at a time, and calls
// after following each release. Leases of 5 s: an Unlock waits no longer
// than its lease has left, and a loaded machine under the race detector
// has spent most of a 1 s lease before its Unlock was answered.
func lockCycles(t *testing.T, l *redlock.Locker, key string, n int, after func()) {
	t.Helper()
	for range n {
		lease, err := l.TryLock(t.Context(), key, 5*time.Second)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(t.Context()))
		after()
	}
}

// sample makes l read every node's clock n times, some milliseconds apart.
func sample(t *testing.T, l *redlock.Locker, n int) {
	t.Helper()
	lockCycles(t, l, "sample", n, func() { time.Sleep(5 * time.Millisecond) })
}

// The double grant that a forward clock jump causes in every Redlock client,
// and the guard that closes it. A holds on nodes 0-2 of five; node 2's clock
// jumps forward and drops A's key; B would win on 2, 3 and 4. B's Locker,
// which has read node 2's clock before, sees the jump in node 2's reply and
// does not count its grant, whether it reads the clock from the marker's
// expiry or from TIME. The negative control, NoQuarantine, must see the
// double grant.
func TestClockJumpQuarantinesTheNode(t *testing.T) {
	for _, byExpiry := range []bool{true, false} {
		for _, guarded := range []bool{true, false} {
			name := map[bool]string{true: "by expiry", false: "by TIME"}[byExpiry] + "/" + map[bool]string{true: "guarded", false: "NoQuarantine"}[guarded]
			t.Run(name, func(t *testing.T) {
				ctx := t.Context()
				c := newCluster(t, 5)
				jumper := newNodeClock(c, 2, byExpiry)
				a := newLocker(t, c.nodes(nil), nil)
				b := newLocker(t, c.nodes(nil), &redlock.Options{NoQuarantine: !guarded})
				sample(t, b, 10)
				if guarded {
					want := map[bool]string{true: redlock.ClockByExpiry, false: redlock.ClockByTime}[byExpiry]
					require.Equal(t, want, b.Health()[2].ClockReadBy)
					require.Equal(t, redlock.ClockByTime, b.Health()[0].ClockReadBy, "no INFO: TIME")
				}

				c.setOther(t, "k", 3, 4)
				lease, err := a.TryLock(ctx, "k", 10*time.Second)
				require.NoError(t, err)
				drain(t, a)
				require.Equal(t, []int{0, 1, 2}, c.holding("k", lease.Value()))
				c.servers[3].Del("k") // the other holder's lease ended there
				c.servers[4].Del("k")

				jumper.Advance(30 * time.Second)
				c.servers[2].FastForward(30 * time.Second) // A's key expires there early
				require.Equal(t, []int{0, 1}, c.holding("k", lease.Value()))

				second, err := b.TryLock(ctx, "k", 10*time.Second)
				if !guarded {
					require.NoError(t, err, "the negative control: without the guard B wins on nodes 2, 3 and 4")
					require.Positive(t, lease.Validity(), "while A's lease is valid: a double grant")
					require.NoError(t, second.Unlock(ctx))
					return
				}
				quarantined(t, err, "its clock jumped forward by")
				require.NotContains(t, err.Error(), "trust -yes", "trusting a node does not undo its clock's jump")
				require.Positive(t, lease.Validity())
				h := b.Health()[2]
				assert.Equal(t, 1, h.ClockJumps)
				assert.Greater(t, h.QuarantineLeft, 59*time.Second)
				assert.Contains(t, h.QuarantineCause, "clock jumped forward")
				for i, h := range b.Health() {
					if i != 2 {
						assert.Zero(t, h.ClockJumps, "node %d", i)
						assert.Zero(t, h.QuarantineLeft, "node %d", i)
					}
				}
				_ = lease.Unlock(ctx) // A's key is gone from node 2
			})
		}
	}
}

// On a server that says its uptime and whose keys expire by its clock (as
// Redis's do), the guard's one companion in the steady state is PTTL of its
// marker: no TIME, no GET, no examination. A marker rewritten since (here by
// another Locker's TrustNodes, which gives it a new expiry) reads as a clock
// years off: it is examined, not counted as a jump. A marker that lost its
// expiry is examined and given one again; a flushed node is quarantined.
func TestGuardReadsTheClockFromTheMarkersExpiry(t *testing.T) {
	onEachTransport(t, func(t *testing.T, opts *redlock.Options) {
		ctx := t.Context()
		c := newCluster(t, 3)
		var clocks []*nodeClock
		for i := range c.servers {
			clocks = append(clocks, newNodeClock(c, i, true))
		}
		l := newLocker(t, c.nodes(nil), opts)
		// Each release settled before the next acquisition: in a batch
		// of its own.
		cycles := func(n int) { t.Helper(); lockCycles(t, l, "k", n, func() { drain(t, l) }) }
		cycles(5)
		for _, nc := range clocks {
			nc.reset()
		}
		cycles(20)
		for i, nc := range clocks {
			// An acquisition decided before its SET left for a node
			// is withdrawn there, unsent: count the SETs.
			assert.Positive(t, nc.count("set"), "node %d", i)
			assert.GreaterOrEqual(t, nc.count("pttl"), nc.count("set"), "node %d: PTTL after each acquisition", i)
			assert.Zero(t, nc.count("time"), "node %d", i)
			assert.Zero(t, nc.count("get marker"), "node %d", i)
			assert.Zero(t, nc.count("examine"), "node %d", i)
		}
		for i, h := range l.Health() {
			assert.Equal(t, redlock.ClockByExpiry, h.ClockReadBy, "node %d", i)
			assert.GreaterOrEqual(t, h.ClockSamples, 25, "node %d", i)
			assert.Zero(t, h.ClockJumps, "node %d", i)
		}

		other := newLocker(t, c.nodes(nil), nil)
		require.NoError(t, other.TrustNodes(ctx)) // new markers, new expiries
		for _, nc := range clocks {
			nc.reset()
		}
		cycles(3)
		for i, h := range l.Health() {
			assert.Equal(t, 1, clocks[i].count("examine"), "node %d: the rewritten marker examined once", i)
			assert.Zero(t, h.ClockJumps, "node %d: a new expiry is not a clock jump", i)
			assert.Zero(t, h.QuarantineLeft, "node %d", i)
			assert.Equal(t, redlock.ClockByExpiry, h.ClockReadBy, "node %d", i)
		}

		value, err := c.servers[1].Get("redlock:memory")
		require.NoError(t, err)
		require.NoError(t, c.servers[1].Set("redlock:memory", value)) // the same marker, no expiry
		clocks[1].reset()
		cycles(3)
		assert.Equal(t, 1, clocks[1].count("examine"), "a marker without an expiry is examined")
		assert.Positive(t, c.servers[1].TTL("redlock:memory"), "and given one again")
		assert.Equal(t, redlock.ClockByExpiry, l.Health()[1].ClockReadBy)

		c.servers[2].FlushAll()
		lease, err := l.TryLock(ctx, "k", time.Second)
		require.NoError(t, err, "nodes 0 and 1")
		require.NoError(t, lease.Unlock(ctx))
		drain(t, l) // node 2's vote, examined, may come after the decision
		h := l.Health()[2]
		assert.Greater(t, h.QuarantineLeft, 59*time.Second)
		assert.Contains(t, h.QuarantineCause, "memory began")
	})
}

// A node whose clock runs 5% fast (its keys expire 5% early) is measured, and
// leases it grants get that much less validity; the other nodes' clocks, read
// through a proxy that adds latency, and one node frozen for a while and
// thawed, raise no alarm.
func TestClockRateShrinksValidity(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	proxies, nodes := c.proxied(t)
	fast := newNodeClock(c, 0, false)
	fast.SetRate(1.05)
	proxies[1].SetDelay(2*time.Millisecond, time.Millisecond)
	// MaxTTL as short as the lease below allows: see measured.
	l := newLocker(t, nodes, &redlock.Options{NodeTimeout: time.Second, MaxTTL: 10 * time.Second})
	plain := newLocker(t, c.nodes(nil)[1:], &redlock.Options{NodeTimeout: time.Second, MaxTTL: 10 * time.Second}) // node 0 not among them

	// Measured, and closely enough that the validity shrinks by most of
	// the excess: the shrink is the rate less its error less the bound, and
	// a first measurement on a loaded machine may carry an error of
	// several percent (shrinking nothing). And out of quarantine: until its
	// rate is measured, node 0's clock is held to the 1% bound, and on a
	// loaded machine a stall between two readings lets its 5% show as a
	// jump (rightly: it breaks the bound), which quarantines it for MaxTTL
	// and measures its rate afresh.
	measured := func() bool {
		h := l.Health()[0]
		return h.ClockMeasured && h.ClockRateErrPPM < 5000 && h.QuarantineLeft == 0
	}
	deadline := time.Now().Add(40 * time.Second)
	for !measured() && time.Now().Before(deadline) {
		sample(t, l, 10)
		if l.Health()[0].ClockSamples > 200 {
			proxies[2].SetBlackhole(true) // frozen for a while
			time.Sleep(300 * time.Millisecond)
			proxies[2].SetBlackhole(false)
		}
	}
	h := l.Health()
	require.True(t, measured(), "the fast node's rate is measured: %+v", h[0])
	assert.InDelta(t, 50000, h[0].ClockRatePPM, 2000+h[0].ClockRateErrPPM)
	for i, h := range h[1:] {
		i++
		assert.Zero(t, h.ClockJumps, "node %d", i)
		assert.Zero(t, h.QuarantineLeft, "node %d", i)
		if h.ClockMeasured {
			assert.Less(t, h.ClockRatePPM-h.ClockRateErrPPM, 10000.0, "node %d is within the bound", i)
		}
	}

	// The fast node must be among the grants the decision counts (a
	// majority of the other two would decide without it, and rightly
	// leave the validity whole): node 2 answers half a second late. The
	// acquisition's own reading may widen the rate's error past measured
	// (one slow round trip on a loaded machine, among few readings): then
	// its validity was rightly left whole too, and it is taken again after
	// more readings.
	ttl := 10 * time.Second
	var validity time.Duration
	var after redlock.NodeHealth
	for attempt := 0; ; attempt++ {
		proxies[2].SetDelay(0, 500*time.Millisecond)
		lease, err := l.TryLock(ctx, "k", ttl)
		require.NoError(t, err)
		validity, after = lease.Validity(), l.Health()[0]
		proxies[2].SetDelay(0, 0)
		require.NoError(t, lease.Unlock(ctx))
		drain(t, l)
		if after.ClockMeasured && after.ClockRateErrPPM < 5000 && after.QuarantineLeft == 0 || attempt == 20 {
			break
		}
		sample(t, l, 50)
	}
	control, err := plain.TryLock(ctx, "k", ttl)
	require.NoError(t, err)
	controlValidity := control.Validity()
	require.NoError(t, control.Unlock(ctx))
	// The drift bound allows 1%; node 0 runs 5% fast, so its keys may
	// expire up to 4% (less the rate's error) of the TTL earlier still.
	shrunk := controlValidity - validity
	assert.Greater(t, shrunk, 250*time.Millisecond, "validity %v against %v; node 0 after the TryLock: %+v", validity, controlValidity, after)
	assert.Less(t, shrunk, 600*time.Millisecond, "validity %v against %v", validity, controlValidity)
}

// Healing: a Do lasting several TTLs over five nodes that forget the lease
// one after another (FLUSHALL: the node guard quarantines each for MaxTTL)
// keeps its lease, since each extension sets the key again where it is
// missing once the node is out of quarantine. Without healing (NoHeal, the
// negative control) the third node to forget leaves a bare minority, and the
// lease is lost. In virtual time: the quarantines and TTLs it waits out
// take no wall time, and a loaded machine's stalls cannot cost the lease.
func TestHealingExtensions(t *testing.T) {
	for _, heal := range []bool{true, false} {
		t.Run(map[bool]string{true: "healing", false: "NoHeal"}[heal], func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T) {
				c := newVirtualCluster(t, 5)
				const ttl, maxTTL = time.Second, 1200 * time.Millisecond
				l := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: maxTTL, NoHeal: !heal, RetryDelay: 5 * time.Millisecond, RetryJitter: 5 * time.Millisecond})
				var held []int // nodes holding the lease after each forgetting, once it healed
				err := l.Do(t.Context(), "k", ttl, func(ctx context.Context, lease *redlock.Lease) error {
					for i := range c.servers {
						c.servers[i].FlushAll() // node i forgets the lease, and its marker
						// Until node i is out of quarantine and healed (or,
						// without healing, for as long), with time to spare.
						// Healed counts only after the guard has seen the
						// loss: an extension on its way at the flush may set
						// the key there again before the guard's next look,
						// which then quarantines the node all the same.
						deadline := time.Now().Add(maxTTL + 2*ttl)
						seen := false
						for time.Now().Before(deadline) && ctx.Err() == nil {
							quarantined := l.Health()[i].QuarantineLeft > 0
							seen = seen || quarantined
							if heal && seen && !quarantined && len(c.holding("k", lease.Value())) == 5 && lease.Holders() == 5 {
								break
							}
							time.Sleep(10 * time.Millisecond)
						}
						if ctx.Err() != nil {
							return ctx.Err()
						}
						held = append(held, lease.Holders())
					}
					return nil
				})
				t.Logf("holders after each node forgot: %v", held)
				if !heal {
					require.ErrorIs(t, err, redlock.ErrLost, "the negative control: without healing the lease ends")
					return
				}
				require.NoError(t, err)
				require.Equal(t, []int{5, 5, 5, 5, 5}, held)
			})
		})
	}
}

// A healing extension that reaches a node late must not set the key again
// after the lease's release: without a pipeline, the release (and the next
// extension) on a node waits for the last extension's call there. Node 0's
// extension is held up; the lease is released at once.
func TestLateHealingExtensionDoesNotOutliveTheRelease(t *testing.T) {
	c := newCluster(t, 3)
	var slow atomic.Bool
	l := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
		if i != 0 {
			return n
		}
		return &hookNode{Node: n, beforeScript: func(_ context.Context, _ []string, args []any) error {
			if isExtension(args) && slow.Load() {
				time.Sleep(300 * time.Millisecond)
			}
			return nil
		}}
	}), nil)
	ctx := t.Context()
	lease, err := l.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	drain(t, l)
	c.servers[0].Del("k") // node 0 forgot it: the extension heals it there, late
	slow.Store(true)
	require.NoError(t, lease.Extend(ctx, 10*time.Second), "nodes 1 and 2")
	require.NoError(t, lease.Unlock(ctx))
	drain(t, l)
	assert.Empty(t, c.holding("k", lease.Value()), "a late extension set the key again after the release")
}

// The guard's check for a new server process rides in every guarded batch,
// however the node is reached: SCRIPT EXISTS of the copy of the examine
// script whose run examined the node, which only that server process has
// cached (internal/guard/proof.go). A restart that kept the memory (miniredis keeps it, as
// an RDB snapshot or AOF would) with an empty script cache is examined at
// the first batch after it, and so is a SCRIPT FLUSH on the same
// connections. A node given as a WithTimeout clone (whose own dial hooks
// never run: it dials through its parent's pool) is checked alike.
func TestGuardChecksForANewProcessInEveryBatch(t *testing.T) {
	for _, clone := range []bool{false, true} {
		t.Run(fmt.Sprintf("clone=%v", clone), func(t *testing.T) {
			onEachTransport(t, func(t *testing.T, opts *redlock.Options) {
				ctx := t.Context()
				c := newCluster(t, 3)
				m := c.servers[0]
				var exists, examines atomic.Int32
				count := func() {
					m.Server().SetPreHook(func(_ *server.Peer, cmd string, args ...string) bool {
						switch {
						case strings.EqualFold(cmd, "script") && len(args) > 0 && strings.EqualFold(args[0], "exists"):
							exists.Add(1)
						case (strings.EqualFold(cmd, "evalsha") || strings.EqualFold(cmd, "eval")) && len(args) > 2 && args[2] == "redlock:memory":
							examines.Add(1)
						}
						return false
					})
				}
				count()
				l := newLocker(t, c.nodes(func(_ int, n redlock.Node) redlock.Node {
					if clone {
						return n.(*redis.Client).WithTimeout(5 * time.Second)
					}
					return n
				}), opts)
				// Each release settled before the next acquisition: in a batch
				// of its own.
				cycles := func(n int) { t.Helper(); lockCycles(t, l, "k", n, func() { drain(t, l) }) }
				cycles(5) // first contact: examined
				exists.Store(0)
				examines.Store(0)
				cycles(20)
				require.EqualValues(t, 20, exists.Load(), "one SCRIPT EXISTS per acquisition (its release is not guarded)")
				require.Zero(t, examines.Load())

				other := newClient(t, m.Addr())
				require.NoError(t, other.ScriptFlush(ctx).Err())
				cycles(5)
				require.Positive(t, examines.Load(), "a flushed cache is examined, on the same connections too")
				examines.Store(0)

				m.Close()
				require.NoError(t, redistest.Restart(m))
				count()
				require.NoError(t, other.ScriptFlush(ctx).Err()) // a new process: its cache is empty
				cycles(5)
				require.Positive(t, examines.Load(), "the new process's empty cache sends the guard to examine the node")
				examines.Store(0)
				cycles(5)
				require.Zero(t, examines.Load(), "examined once")
			})
		})
	}
}

// Every Locker of a deployment quarantines a node for the longest MaxTTL
// any of them declared, which the guard's marker carries: otherwise a
// Locker with a short MaxTTL would let a node back while a longer lease it
// granted before forgetting may still be held. A (MaxTTL 1 s) and B (10 s)
// share a node whose memory began now (miniredis says no uptime): after B
// examined it, A's quarantine lasts B's 10 s, not its own 1 s; and A, had
// it examined first, learns B's once B has written it.
func TestLockersShareTheLongestMaxTTL(t *testing.T) {
	for _, shortFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("shortFirst=%v", shortFirst), func(t *testing.T) {
			ctx := t.Context()
			c := newCluster(t, 1)
			c.servers[0].Del("redlock:memory") // a new node: its memory begins at first use
			short := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: time.Second})
			long := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: 10 * time.Second})
			order := []*redlock.Locker{long, short}
			if shortFirst {
				order = []*redlock.Locker{short, long}
			}
			for i, l := range order { // each on a key of its own: a refused grant is released in the background
				_, err := l.TryLock(ctx, fmt.Sprintf("k%d", i), 500*time.Millisecond)
				quarantined(t, err, memoryCause)
			}
			_, err := short.TryLock(ctx, "k2", 500*time.Millisecond)
			quarantined(t, err, memoryCause)
			left := short.Health()[0].QuarantineLeft
			assert.Greater(t, left, 5*time.Second, "the short Locker quarantines for the long one's MaxTTL")
			assert.LessOrEqual(t, left, 10*time.Second+200*time.Millisecond)

			// The control: a Locker alone with its 1 s.
			alone := newCluster(t, 1)
			alone.servers[0].Del("redlock:memory")
			solo := newLocker(t, alone.nodes(nil), &redlock.Options{MaxTTL: time.Second})
			_, err = solo.TryLock(ctx, "k", 500*time.Millisecond)
			quarantined(t, err, memoryCause)
			assert.LessOrEqual(t, solo.Health()[0].QuarantineLeft, time.Second+100*time.Millisecond)
		})
	}
}

// A node that loses its memory loses its marker's word on MaxTTL too. A
// Locker that learned a longer MaxTTL writes it into the new marker, and a
// Locker that never met the longer one learns it from the other nodes'
// markers (one word per Locker, over all its nodes): either way node 0's
// quarantine lasts the long Locker's 10 s, not 1 s. (A deployment of one
// node that forgot has no other marker to tell a new Locker: there every
// Locker must use the same MaxTTL.)
func TestLockersKeepTheLongestMaxTTLAfterAMemoryLoss(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	long := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: 10 * time.Second})
	_, err := long.TryLock(ctx, "k", 8*time.Second)
	require.NoError(t, err)
	short := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: time.Second})
	_, err = short.TryLock(ctx, "k", 500*time.Millisecond)
	require.ErrorIs(t, err, redlock.ErrNotObtained) // examined every node: learned 10 s

	c.servers[0].FlushAll() // node 0 restarted without persistence
	_, err = short.TryLock(ctx, "x", 500*time.Millisecond)
	require.NoError(t, err, "nodes 1 and 2 carry it")
	drain(t, short)
	marker, _ := c.servers[0].Get("redlock:memory")
	assert.Regexp(t, `^\d+ \S+ 10000 `, marker, "the new marker keeps the longest MaxTTL the Locker knew")
	assert.Greater(t, short.Health()[0].QuarantineLeft, 5*time.Second)

	c.servers[0].FlushAll() // and again, now with no Locker's word on it
	fresh := newLocker(t, c.nodes(nil), &redlock.Options{MaxTTL: time.Second})
	_, err = fresh.TryLock(ctx, "y", 500*time.Millisecond)
	require.NoError(t, err, "nodes 1 and 2 carry it")
	drain(t, fresh)
	assert.Greater(t, fresh.Health()[0].QuarantineLeft, 5*time.Second, "learned from nodes 1 and 2, after node 0 was examined too")
}

// A *redis.Ring of several shards is refused with the guard on: the
// marker would live on one shard while lock keys hash to the others.
func TestRingOfShardsNeedsNoQuarantine(t *testing.T) {
	a, b := redistest.Miniredis(t), redistest.Miniredis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { ring.Close() })
	_, err := redlock.New([]redlock.Node{ring}, nil)
	require.ErrorContains(t, err, "node 0 is a *redis.Ring of 2 shards")
	_, err = redlock.New([]redlock.Node{ring}, &redlock.Options{NoQuarantine: true})
	require.NoError(t, err)
}

// TrustNodes keeps the longest MaxTTL any Locker declared in the node's
// markers, as every examination does: a Locker with a shorter MaxTTL that
// trusts the nodes after one with a longer MaxTTL declared it must not
// shorten the quarantine the markers ask of every Locker (a node that
// forgets later is let back after the shorter MaxTTL while a lease of the
// longer one may still be held). On a standalone node and on each hash
// slot's marker of a Redis Cluster alike.
func TestTrustNodesKeepsTheLongestDeclaredMaxTTL(t *testing.T) {
	for _, tt := range []struct {
		name   string
		node   func(addr string) redlock.Node
		marker string
	}{
		{"standalone", func(addr string) redlock.Node { return newClient(t, addr) }, "redlock:memory"},
		{"cluster", func(addr string) redlock.Node { return newClusterClient(t, addr) }, "redlock:memory:{" + hashtag.TagFor(hashtag.Slot("k")) + "}"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			m := redistest.Miniredis(t)
			node := tt.node(m.Addr()) // closed when the test ends
			long := newLocker(t, []redlock.Node{node}, &redlock.Options{MaxTTL: time.Hour})
			require.NoError(t, long.TrustNodes(ctx))
			short := newLocker(t, []redlock.Node{node}, &redlock.Options{MaxTTL: time.Minute})
			require.NoError(t, short.TrustNodes(ctx))
			v, err := m.Get(tt.marker)
			require.NoError(t, err)
			f := strings.Fields(v)
			require.GreaterOrEqual(t, len(f), 3, "marker %q", v)
			assert.Equal(t, strconv.FormatInt(time.Hour.Milliseconds(), 10), f[2], "the MaxTTL the marker %q declares", v)
		})
	}
}

// A quarantine's error says what every node is, the cause once, and, where
// the nodes' memory began recently, how an operator trusts servers new to
// the deployment; what it knows of a node the round did not wait for is
// what the guard last examined, never a guess.
func TestQuarantineReportSaysWhatEachNodeIsAndHowToTrustNewServers(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	for _, m := range c.servers {
		m.Del("redlock:memory") // as new servers: no marker
	}
	proxies, nodes := c.proxied(t)
	l := newLocker(t, nodes, nil)

	proxies[2].SetDelay(0, 300*time.Millisecond)
	_, err := l.TryLock(ctx, "k", time.Second)
	quarantined(t, err, memoryCause)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	require.Equal(t, redlock.Unanswered, qe.Nodes[2].Outcome, "decided by nodes 0 and 1")
	require.NoError(t, qe.Nodes[2].Err, "never examined: nothing is known of it yet")

	drain(t, l) // node 2's reply has come: its guard examined it
	_, err = l.TryLock(ctx, "k", time.Second)
	require.ErrorAs(t, err, &qe)
	require.Equal(t, redlock.Unanswered, qe.Nodes[2].Outcome)
	var q *redlock.QuarantineError
	require.ErrorAs(t, qe.Nodes[2].Err, &q, "what the guard last examined on node 2")
	require.True(t, q.Forgot)
	require.Greater(t, q.Left, 59*time.Second)
	msg := err.Error()
	require.Contains(t, msg, "node 2 ("+proxies[2].Addr()+"): not answered before the decision, and when last examined: redlock: node quarantined for")
	require.Equal(t, 1, strings.Count(msg, "its memory began"), "the cause once: %s", msg)
	require.Contains(t, msg, "as above")
	require.Contains(t, msg, "redlock-admin -nodes "+proxies[0].Addr()+","+proxies[1].Addr()+","+proxies[2].Addr()+" trust -yes",
		"the error says what to run on new servers")

	proxies[2].SetDelay(0, 0)
	drain(t, l)
	require.NoError(t, l.TrustNodes(ctx), "what the error says to do")
	lease, err := l.TryLock(ctx, "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(ctx))
}

// TrustNewNodes trusts a deployment no guarded Locker has used, and leaves
// one in use as it is: a node that restarted empty beside nodes that
// remember still waits out its quarantine (where TrustNodes, the negative
// control, would have lifted it).
func TestTrustNewNodes(t *testing.T) {
	ctx := t.Context()
	fresh := func(t *testing.T) *cluster {
		c := newCluster(t, 3)
		for _, m := range c.servers {
			m.Del("redlock:memory") // as new servers: no marker
		}
		return c
	}

	t.Run("servers just started are trusted", func(t *testing.T) {
		c := fresh(t)
		l := newLocker(t, c.nodes(nil), nil)
		_, err := l.TryLock(ctx, "k", time.Second)
		quarantined(t, err, memoryCause) // a first run without it: every node examined
		drain(t, l)
		trusted, err := newLocker(t, c.nodes(nil), nil).TrustNewNodes(ctx)
		require.NoError(t, err)
		require.True(t, trusted, "no node has been able to count for a lease yet")
		lease, err := l.TryLock(ctx, "k", time.Second)
		require.NoError(t, err, "the first lock of a new deployment")
		require.NoError(t, lease.Unlock(ctx))
		again, err := newLocker(t, c.nodes(nil), nil).TrustNewNodes(ctx)
		require.NoError(t, err)
		require.False(t, again, "the next program's start finds the deployment in use")
	})

	for _, control := range []bool{false, true} {
		name := "a node that restarted empty beside used ones still waits"
		if control {
			name = "negative control: TrustNodes lifts that node's quarantine"
		}
		t.Run(name, func(t *testing.T) {
			c := fresh(t)
			l := newLocker(t, c.nodes(nil), nil)
			require.NoError(t, l.TrustNodes(ctx))
			lease, err := l.TryLock(ctx, "k", time.Minute)
			require.NoError(t, err)
			drain(t, l)             // every node has the lease (a SET decided without may land late)
			c.servers[0].FlushAll() // node 0 forgets while the lease is held

			next := newLocker(t, c.nodes(nil), nil) // a program that starts now
			if control {
				require.NoError(t, next.TrustNodes(ctx))
			} else {
				trusted, err := next.TrustNewNodes(ctx)
				require.NoError(t, err)
				require.False(t, trusted)
			}
			// The holder's value is gone from node 0; with node 0 trusted,
			// a Locker limited to nodes 0 and 1 would need node 1 too
			// (held), so ask node 0 alone.
			alone := newLocker(t, c.nodes(nil)[:1], nil)
			second, err := alone.TryLock(ctx, "k", time.Minute)
			if control {
				require.NoError(t, err, "trusted by hand: node 0 grants k again while the lease is held")
				require.NoError(t, second.Unlock(ctx))
			} else {
				quarantined(t, err, memoryCause)
			}
			drain(t, alone)
			require.NoError(t, lease.Unlock(ctx))
		})
	}

	t.Run("a node that does not answer trusts nothing", func(t *testing.T) {
		c := fresh(t)
		proxies, nodes := c.proxied(t)
		proxies[2].SetDown(true)
		l := newLocker(t, nodes, nil)
		trusted, err := l.TrustNewNodes(ctx)
		require.Error(t, err)
		require.False(t, trusted)
		require.Contains(t, err.Error(), "TrustNewNodes: node 2 (")
		for i, h := range l.Health()[:2] {
			require.Greater(t, h.QuarantineLeft, 59*time.Second, "node %d: trusted", i)
		}
	})
}

// reportAfterAJump is the error of l's TryLock once its guard has seen a
// node's clock jump: the first attempt's replies show the jump, the
// second attempt reports it.
func reportAfterAJump(t *testing.T, l *redlock.Locker) string {
	t.Helper()
	var err error
	for range 2 {
		_, err = l.TryLock(t.Context(), "k", time.Second)
		require.Error(t, err)
		drain(t, l)
	}
	return err.Error()
}

// New servers, one of whose clocks jumps forward while they sit out their
// first quarantine: the report names both causes of node 2's, and the
// trust it offers says that node 2 stays out after it (a trust lifts a new
// memory's quarantine, not a clock jump's). After the trust the others
// lock; node 2 is still out, for its clock.
func TestQuarantineReportNamesAClockJumpBesideANewMemory(t *testing.T) {
	ctx := t.Context()
	c := freshCluster(t, 3)
	jumper := newNodeClock(c, 2, false)
	l := newLocker(t, c.nodes(nil), nil)
	for range 5 { // readings of node 2's clock, while every node is new
		_, err := l.TryLock(ctx, "k", time.Second)
		quarantined(t, err, memoryCause)
		drain(t, l)
		time.Sleep(5 * time.Millisecond)
	}
	jumper.Advance(30 * time.Second)
	msg := reportAfterAJump(t, l)
	assert.Contains(t, msg, "its clock jumped forward by", msg)
	assert.Contains(t, msg, "trust -yes", "nodes 0 and 1 are new: a trust helps")
	assert.Regexp(t, `a trust does not lift a clock jump's quarantine: node 2 \(\S+\) for \S+ more stay out after it`, msg)

	require.NoError(t, l.TrustNodes(ctx))
	lease, err := l.TryLock(ctx, "k", time.Second)
	require.NoError(t, err, "nodes 0 and 1, trusted")
	require.NoError(t, lease.Unlock(ctx))
	h := l.Health()[2]
	assert.Greater(t, h.QuarantineLeft, 50*time.Second, "node 2 is out for its clock")
	assert.Contains(t, h.QuarantineCause, "clock jumped forward")
}

// Node 0 is a new server (no marker); nodes 1 and 2 are whole, but their
// clocks jump forward: quarantined for the jump alone, which a trust does
// not lift. The quorum error offers the trust for node 0; following it
// leaves nodes 1 and 2 out, and no majority. The offer must say so, as it
// does for a node quarantined for both causes ("a trust does not lift a
// clock jump's quarantine: ... stay out after it"), or not be made.
func TestQuarantineRemedySaysWhichNodesATrustLeavesOutForTheirClock(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	c.servers[0].Del("redlock:memory") // node 0: a new server
	jumpers := []*nodeClock{newNodeClock(c, 1, false), newNodeClock(c, 2, false)}
	l := newLocker(t, c.nodes(nil), nil)
	for range 5 { // readings of the clocks; nodes 1 and 2 make a majority
		lease, err := l.TryLock(ctx, "k", time.Second)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(ctx))
		drain(t, l)
		time.Sleep(5 * time.Millisecond)
	}
	for _, j := range jumpers {
		j.Advance(30 * time.Second)
	}
	msg := reportAfterAJump(t, l)
	require.Contains(t, msg, "its clock jumped forward by", msg)

	require.NoError(t, l.TrustNodes(ctx))
	_, after := l.TryLock(ctx, "k", time.Second)
	require.Error(t, after, "control: after the trust, nodes 1 and 2 are still out for their clocks: no majority")
	drain(t, l)
	if assert.Contains(t, msg, "trust -yes", "the offer is made") {
		assert.Regexp(t, `stay out after it`, msg, "the offer says nodes 1 and 2 stay out after the trust")
	}
}
