package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/redlock"
)

func TestFencingTokensGrow(t *testing.T) {
	c := newCluster(t, 5)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	var prev uint64
	for i := range 20 {
		lease, err := l.TryLock(t.Context(), "k", time.Minute)
		require.NoError(t, err)
		require.Greater(t, lease.Token(), prev, "acquisition %d", i)
		assert.Less(t, lease.Token()&0xff, uint64(5), "the low byte names a node")
		prev = lease.Token()
		require.NoError(t, lease.Extend(t.Context(), time.Minute))
		require.NoError(t, lease.Unlock(t.Context()))
	}
	drain(t, l)
	for i, m := range c.servers {
		assert.True(t, m.Exists("{k}:fencing"), "node %d has no counter", i)
		assert.Zero(t, m.TTL("{k}:fencing"), "node %d: counters must never expire", i)
	}
	other, err := l.TryLock(t.Context(), "other-key", time.Minute)
	require.NoError(t, err)
	assert.Less(t, other.Token(), prev, "tokens of another key start over")

	unfenced := newLocker(t, c.nodes(nil), nil)
	lease, err := unfenced.TryLock(t.Context(), "plain", time.Minute)
	require.NoError(t, err)
	assert.Zero(t, lease.Token())
}

// A phase-1 script whose reply is lost is resent by go-redis and must return
// the counter without incrementing it again.
func TestFencingSurvivesClientRetries(t *testing.T) {
	c := newCluster(t, 3)
	proxies, nodes := c.proxied(t)
	l := newLocker(t, nodes, &redlock.Options{Fencing: true, NodeTimeout: 5 * time.Second})
	for _, p := range proxies {
		p.CutReplies(1)
	}
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	drain(t, l)
	assert.Equal(t, uint64(1), lease.Token()>>8)
	for i, m := range c.servers {
		v, _ := m.Get("{k}:fencing")
		assert.Equal(t, "1", v, "node %d counted the retried acquisition twice", i)
	}
}

func TestDurabilityOnNodesWithoutConfig(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true, RequireDurable: true})
	for _, d := range l.Durability(t.Context()) {
		assert.False(t, d.Durable)
		assert.Error(t, d.Err, "miniredis has no CONFIG GET")
	}
	_, err := l.TryLock(t.Context(), "k", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotDurable)
	_, err = redlock.New(c.nodes(nil), &redlock.Options{RequireDurable: true})
	assert.ErrorContains(t, err, "needs Options.Fencing")
}

// chaos injects seeded faults into one Locker's view of one node: late
// replies, phase-2 messages lost before or after the node applied them, and
// the lock key vanishing on that node alone.
type chaos struct {
	redlock.Node
	srv   *miniredis.Miniredis
	key   string
	mu    *sync.Mutex
	rnd   *rand.Rand
	scale time.Duration // multiplies the delays
}

var errLostMessage = errors.New("chaos: message lost")

func (c chaos) chance(p float64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rnd.Float64() < p
}

func (c chaos) delay() {
	c.mu.Lock()
	d := time.Duration(0)
	if c.rnd.Float64() < 0.2 {
		d = time.Duration(c.rnd.Int64N(int64(15 * time.Millisecond * c.scale)))
	}
	c.mu.Unlock()
	time.Sleep(d)
}

func (c chaos) Do(ctx context.Context, args ...any) *redis.Cmd {
	if !guardCompanion(args) { // the guard's companions ride with the call: its delay is theirs
		c.delay()
	}
	return c.Node.Do(ctx, args...)
}

func (c chaos) script(ctx context.Context, run func() *redis.Cmd, keys []string, args []any) *redis.Cmd {
	phase2 := isPhase2Script(keys, args)
	if phase2 && c.chance(0.15) {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errLostMessage)
		return cmd
	}
	c.delay()
	cmd := run()
	if phase2 && c.chance(0.1) {
		cmd.SetErr(errLostMessage) // applied, but the reply is lost
	}
	if c.chance(0.05) {
		c.srv.Del(c.key) // the key expires early on this node alone
	}
	return cmd
}

func (c chaos) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if strings.HasPrefix(keys[0], "redlock:memory") { // the guard's examination: not the schedule's
		return c.Node.EvalSha(ctx, sha, keys, args...)
	}
	return c.script(ctx, func() *redis.Cmd { return c.Node.EvalSha(ctx, sha, keys, args...) }, keys, args)
}

func (c chaos) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	if strings.HasPrefix(keys[0], "redlock:memory") {
		return c.Node.Eval(ctx, src, keys, args...)
	}
	return c.script(ctx, func() *redis.Cmd { return c.Node.Eval(ctx, src, keys, args...) }, keys, args)
}

// chaosHook does to a pipelined client's batches what chaos does to a
// Node's calls: the batch is late, phase-2 commands in it are lost before or
// after the node applied them, and the key vanishes on the node. It reads the
// schedule's seeded state from state, which the test sets per schedule.
type chaosHook struct {
	srv   *miniredis.Miniredis
	state *chaos // the schedule's key, seeded randomness and scale
}

func (h *chaosHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook covers batches of one command, which go-redis sends on its
// plain path.
func (h *chaosHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, ours := cmd.(*redis.Cmd); !ours { // a connection's set-up
			return next(ctx, cmd)
		}
		return h.batch(ctx, []redis.Cmder{cmd}, func(ctx context.Context, cmds []redis.Cmder) error {
			return next(ctx, cmds[0])
		})
	}
}

func (h *chaosHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch cmds[0].Name() {
		case "hello", "client": // a new connection's set-up
			return next(ctx, cmds)
		}
		return h.batch(ctx, cmds, next)
	}
}

// batch sends cmds through next with the schedule's faults.
func (h *chaosHook) batch(ctx context.Context, cmds []redis.Cmder, next func(context.Context, []redis.Cmder) error) error {
	c := *h.state
	c.srv = h.srv
	send := make([]redis.Cmder, 0, len(cmds))
	for _, cmd := range cmds {
		if isPhase2(cmd) && c.chance(0.15) {
			cmd.SetErr(errLostMessage)
			continue
		}
		send = append(send, cmd)
	}
	c.delay()
	var err error
	if len(send) > 0 {
		err = next(ctx, send)
	}
	for _, cmd := range send {
		if isPhase2(cmd) && c.chance(0.1) {
			cmd.SetErr(errLostMessage) // applied, but the reply is lost
		}
	}
	if c.chance(0.05) {
		c.srv.Del(c.key) // the key expires early on this node alone
	}
	return err
}

// isPhase2 tells a fencing phase-2 script (EVALSHA or EVAL) from the other
// commands (see isPhase2Script).
func isPhase2(cmd redis.Cmder) bool {
	keys, argv, ok := scriptParts(cmd)
	return ok && isPhase2Script(keys, argv)
}

// scriptParts returns a script command's keys and arguments.
func scriptParts(cmd redis.Cmder) (keys []string, argv []any, ok bool) {
	args := cmd.Args()
	if (cmd.Name() != "evalsha" && cmd.Name() != "eval") || len(args) < 3 {
		return nil, nil, false
	}
	n, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil || len(args) < 3+n {
		return nil, nil, false
	}
	for _, k := range args[3 : 3+n] {
		keys = append(keys, fmt.Sprint(k))
	}
	return keys, args[3+n:], true
}

// isPhase2Script tells the fencing phase-2 scripts (one key's or a
// multi-key lease's: its keys, then as many fencing counters and token
// records; the value, then each counter's target and each key's token,
// sent as strings) from phase 1 (the TTL sent as a number) and the rest
// (no counters among the keys).
func isPhase2Script(keys []string, argv []any) bool {
	n := len(keys) / 3
	if n < 1 || len(keys) != 3*n || !strings.HasSuffix(keys[n], ":fencing") || !strings.Contains(keys[2*n], ":fencing-token") || len(argv) != 1+2*n {
		return false
	}
	_, ok := argv[1].(string)
	return ok
}

// TestFencingOrderUnderRandomSchedules runs many seeded schedules: three
// clients (one of which takes the key in a multi-key lease with another
// key, whose token for the key, TokenOf, must order with the others'),
// five nodes, random pauses and late replies, lost phase-2 messages
// and single-node key loss, with leases short enough to expire under the
// pauses. In every run, Order (an acquisition that began after another
// returned has a higher token) and Uniqueness must hold. Schedules run six
// at a time, each on its own key, over both transports: the direct one
// (faults injected per call by a wrapping Node) and the auto-pipeline
// (faults injected per batch by a go-redis hook).
func TestFencingOrderUnderRandomSchedules(t *testing.T) {
	choosesItsTransports(t)
	runs, parallel, scale := 2000, 6, time.Duration(1)
	switch {
	case raceEnabled: // scripts/test.sh also runs the full set without -race
		runs, parallel, scale = 50, 8, 8 // per transport
	case testing.Short():
		runs = 300
	}
	c := newCluster(t, 5)
	for i, m := range c.servers { // concurrent schedules need more connections
		c.clients[i] = redis.NewClient(&redis.Options{Addr: m.Addr(), PoolSize: 256})
		t.Cleanup(func() { c.clients[i].Close() })
	}
	t.Run("direct", func(t *testing.T) {
		runSchedules(t, c.servers, runs, parallel, func() scheduleNodes {
			return func(_ int, state *chaos) []redlock.Node {
				return c.nodes(func(i int, n redlock.Node) redlock.Node {
					ch := *state
					ch.Node, ch.srv = n, c.servers[i]
					return ch
				})
			}
		}, scale)
	})
	t.Run("auto-pipeline", func(t *testing.T) {
		runSchedules(t, c.servers, runs, parallel, func() scheduleNodes {
			// Each worker has its own clients, three Lockers' worth, whose
			// hooks read the state of the worker's current schedule.
			state := &chaos{}
			clients := hookedClients(t, c.servers, func(m *miniredis.Miniredis) redis.Hook { return &chaosHook{srv: m, state: state} })
			return func(k int, s *chaos) []redlock.Node {
				if k == 0 { // a new schedule: the last one's calls are all over
					*state = *s
				}
				return clients[k]
			}
		}, scale)
	})
}

// hookedClients are three Lockers' worth of clients of servers, one per
// server each, every one with the hook made for its server.
func hookedClients(t *testing.T, servers []*miniredis.Miniredis, hook func(*miniredis.Miniredis) redis.Hook) [3][]redlock.Node {
	var clients [3][]redlock.Node
	for k := range clients {
		for _, m := range servers {
			cl := redis.NewClient(&redis.Options{Addr: m.Addr()})
			cl.AddHook(hook(m))
			t.Cleanup(func() { cl.Close() })
			clients[k] = append(clients[k], cl)
		}
	}
	return clients
}

// The control of TestFencingOrderUnderRandomSchedules: the same schedules
// with phase 2 removed entirely (the maximum of the phase-1 counters alone)
// break Order, where counters stand apart; with the fast path (phase 2
// only where the counters that granted disagree) they do not.
func TestFencingWithoutPhaseTwoBreaksOrder(t *testing.T) {
	choosesItsTransports(t)
	runs, parallel, scale := 200, 4, time.Duration(1)
	if raceEnabled {
		runs, parallel, scale = 60, 8, 8
	}
	c := newCluster(t, 5)
	direct := func() scheduleNodes {
		return func(_ int, state *chaos) []redlock.Node {
			return c.nodes(func(i int, n redlock.Node) redlock.Node {
				ch := *state
				ch.Node, ch.srv = n, c.servers[i]
				return ch
			})
		}
	}
	got := exploreSchedules(c.servers, runs, parallel, direct, scale, unsafelocker.Hooks{NoFencingPhase2: true}, func(e explored) bool { return len(e.failed) > 0 })
	t.Logf("without phase 2: %d of %d schedules broke Order or Uniqueness; the first: %s", len(got.failed), got.seeds, strings.Join(got.failed[:min(1, len(got.failed))], ""))
	require.NotEmpty(t, got.failed, "the maximum alone must break Order in some schedule (the control)")
}

// scheduleNodes returns the nodes of Locker k (of 3) for a schedule whose
// chaos state (key, seeded randomness, scale) is s.
type scheduleNodes func(k int, s *chaos) []redlock.Node

// runSchedules runs seeds 1..runs, parallel at a time, on servers; each
// worker gets its nodes from newWorker. Every violation fails t.
func runSchedules(t *testing.T, servers []*miniredis.Miniredis, runs, parallel int, newWorker func() scheduleNodes, scale time.Duration) {
	got := exploreSchedules(servers, runs, parallel, newWorker, scale, unsafelocker.Hooks{}, func(e explored) bool { return e.acquired > runs/10 })
	t.Logf("explored %d seeded schedules (seeds 1..%d, counters %s by turns); %d successful acquisitions checked", got.seeds, got.seeds, strings.Join(counterPresets, ", "), got.acquired)
	for _, f := range got.failed {
		t.Error(f)
	}
	assert.Greater(t, got.acquired, runs/10, "too few acquisitions succeeded for the check to mean much")
}

// counterPresets are how the nodes' fencing counters stand when a
// schedule begins, by seed in turn: every node at the same count; each
// node at it or one behind; two nodes of five ten behind; two nodes of
// five a thousand ahead (the shape of the counterexample to the maximum
// alone: an acquisition that wins them and one that does not).
var counterPresets = []string{"in step", "lagging by one", "lagging on a minority", "ahead on a minority"}

// presetCounters sets key's fencing counter on every server as seed's
// preset (counterPresets) has it.
func presetCounters(servers []*miniredis.Miniredis, key string, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 1))
	picked := rnd.Perm(len(servers))[:2] // the minority of the last two presets
	for i, m := range servers {
		n := 1000
		switch seed % uint64(len(counterPresets)) {
		case 1:
			n -= rnd.IntN(2)
		case 2:
			if slices.Contains(picked, i) {
				n -= 10
			}
		case 3:
			if slices.Contains(picked, i) {
				n += 1000
			}
		}
		_ = m.Set("{"+key+"}:fencing", strconv.Itoa(n))
	}
}

// explored is what a seeded exploration saw: the schedules it ran, the
// acquisitions it checked (multi: those of the schedule's key that were
// multi-key leases), and the violations it found.
type explored struct {
	seeds, acquired, multi int
	failed                 []string
}

// exploreSchedules runs seeds as runSchedules does (see eachSeed for how
// many), and returns what it saw.
func exploreSchedules(servers []*miniredis.Miniredis, runs, parallel int, newWorker func() scheduleNodes, scale time.Duration, hooks unsafelocker.Hooks, enough func(explored) bool) explored {
	var mu sync.Mutex
	var got explored
	got.seeds = eachSeed(runs, parallel, newWorker, func(nodes scheduleNodes, seed uint64) {
		presetCounters(servers, fmt.Sprintf("sched:%d", seed), seed)
		n, err := runSchedule(nodes, seed, scale, hooks)
		mu.Lock()
		defer mu.Unlock()
		got.acquired += n
		if err != nil {
			got.failed = append(got.failed, err.Error())
		}
	}, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return enough(got)
	})
	return got
}

// moreSeedsAtMost bounds how far eachSeed goes past its runs, as a
// multiple of them.
const moreSeedsAtMost = 4

// eachSeed runs seeds 1..runs on parallel workers, each with what
// newWorker made for it (its nodes), calling run for every seed it
// takes, and returns how many seeds ran. While enough says the seeds run
// so far have not yet shown what the test needs (acquisitions to check,
// or a control's violation), it goes on with more seeds, up to
// moreSeedsAtMost times runs: a loaded machine makes timeouts, so fewer
// acquisitions per seed, and a test that stopped at a fixed count would
// then fail for want of evidence, not for a fault.
func eachSeed[W any](runs, parallel int, newWorker func() W, run func(w W, seed uint64), enough func() bool) int {
	seeds := make(chan uint64)
	sent := 0
	go func() {
		defer close(seeds)
		for seed := uint64(1); seed <= uint64(moreSeedsAtMost*runs); seed++ {
			if seed > uint64(runs) && enough() {
				return
			}
			seeds <- seed
			sent++
		}
	}()
	var workers sync.WaitGroup
	for range parallel {
		w := newWorker()
		workers.Go(func() {
			for seed := range seeds {
				run(w, seed)
			}
		})
	}
	workers.Wait()
	return sent
}

// runSchedule runs the schedule of one seed and checks its acquisitions.
// Every duration is multiplied by scale.
func runSchedule(nodesOf scheduleNodes, seed uint64, scale time.Duration, hooks unsafelocker.Hooks) (int, error) {
	type acquisition struct {
		start, end time.Time
		token      uint64
	}
	key := fmt.Sprintf("sched:%d", seed)
	var mu sync.Mutex
	rnd := rand.New(rand.NewPCG(seed, 0))
	state := &chaos{key: key, mu: &mu, rnd: rnd, scale: scale}
	var got []acquisition
	var wg sync.WaitGroup
	for k := range 3 {
		l, err := redlock.New(nodesOf(k, state), withHooks(&redlock.Options{Fencing: true, NodeTimeout: 10 * time.Millisecond * scale}, hooks))
		if err != nil {
			return 0, err
		}
		// The node guard's first examination of each node (a script,
		// which miniredis runs slowly) is not the schedule's to time.
		if err := l.Warm(context.Background()); err != nil {
			return 0, err
		}
		wg.Go(func() {
			defer l.Drain(context.Background())
			for range 4 {
				start := time.Now()
				var lease *redlock.Lease
				var err error
				if k == 2 { // a multi-key lease of the key and another: the same counter orders both kinds
					lease, err = l.TryLockMulti(context.Background(), []string{key + ":also", key}, 40*time.Millisecond*scale)
				} else {
					lease, err = l.TryLock(context.Background(), key, 40*time.Millisecond*scale)
				}
				end := time.Now()
				if err != nil {
					continue
				}
				mu.Lock()
				got = append(got, acquisition{start, end, lease.TokenOf(key)})
				pause := time.Duration(rnd.Int64N(int64(50 * time.Millisecond * scale)))
				mu.Unlock()
				time.Sleep(pause) // sometimes past the lease's expiry
				_ = lease.Unlock(context.Background())
			}
		})
	}
	wg.Wait()
	tokens := map[uint64]bool{}
	for _, a := range got {
		if tokens[a.token] {
			return len(got), fmt.Errorf("seed %d: token %d issued twice", seed, a.token)
		}
		tokens[a.token] = true
		for _, b := range got {
			if a.end.Before(b.start) && b.token <= a.token {
				return len(got), fmt.Errorf("seed %d: order broken: token %d acquired after %d returned", seed, b.token, a.token)
			}
		}
	}
	return len(got), nil
}

// configNode answers CONFIG GET, which miniredis lacks, with durable
// settings, after wait (if set) returns nil; an error from wait is the reply.
type configNode struct {
	redlock.Node
	wait func(ctx context.Context) error
}

func (n *configNode) Do(ctx context.Context, args ...any) *redis.Cmd {
	if len(args) == 0 || args[0] != "CONFIG" {
		return n.Node.Do(ctx, args...)
	}
	cmd := redis.NewCmd(ctx, args...)
	if n.wait != nil {
		if err := n.wait(ctx); err != nil {
			cmd.SetErr(err)
			return cmd
		}
	}
	cmd.SetVal([]any{"appendonly", "yes", "appendfsync", "always", "maxmemory-policy", "noeviction"})
	return cmd
}

// A caller whose deadline cuts the durability check short gets its own
// deadline back, not ErrNotDurable, and the next caller is not refused: only
// the nodes' verdict is cached.
func TestRequireDurableCachesOnlyTheNodesVerdict(t *testing.T) {
	c := newCluster(t, 3)
	var slow atomic.Bool
	slow.Store(true)
	l := newLocker(t, c.nodes(func(_ int, n redlock.Node) redlock.Node {
		return &configNode{Node: n, wait: func(ctx context.Context) error {
			if slow.Load() {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}}
	}), &redlock.Options{Fencing: true, RequireDurable: true})

	short, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
	defer cancel()
	_, err := l.TryLock(short, "k", time.Minute)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, redlock.ErrNotDurable)

	slow.Store(false)
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err, "the first caller's deadline must not decide for the next")
	require.NoError(t, lease.Unlock(t.Context()))
}

// One caller's slow durability check holds up no other caller.
func TestRequireDurableCheckRunsOutsideTheLock(t *testing.T) {
	c := newCluster(t, 3)
	gate := make(chan struct{})
	var opened atomic.Bool
	open := sync.OnceFunc(func() { opened.Store(true); close(gate) })
	watchdog := time.AfterFunc(20*time.Second, open) // bounds the test without the fix
	defer watchdog.Stop()
	var checks atomic.Int32
	l := newLocker(t, c.nodes(func(_ int, n redlock.Node) redlock.Node {
		return &configNode{Node: n, wait: func(ctx context.Context) error {
			if checks.Add(1) <= 3 { // the first caller's check, on every node
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}}
	}), &redlock.Options{Fencing: true, RequireDurable: true, NodeTimeout: time.Minute})

	first := make(chan error, 1)
	go func() {
		lease, err := l.TryLock(t.Context(), "a", time.Minute)
		if err == nil {
			err = lease.Unlock(t.Context())
		}
		first <- err
	}()
	require.Eventually(t, func() bool { return checks.Load() >= 3 }, 10*time.Second, time.Millisecond)
	lease, err := l.TryLock(t.Context(), "b", time.Minute)
	require.NoError(t, err)
	assert.False(t, opened.Load(), "the second caller waited for the first one's check")
	require.NoError(t, lease.Unlock(t.Context()))
	open()
	require.NoError(t, <-first)
}

// Once lock "a" has a fencing counter, the counter's name cannot be taken as
// a lock (it would be contention forever, or break the counter).
func TestFencingCounterNamesAreReserved(t *testing.T) {
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	plain := newLocker(t, c.nodes(nil), nil)
	lease, err := l.TryLock(t.Context(), "a", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(t.Context()))
	for _, locker := range []*redlock.Locker{l, plain} {
		_, err := locker.TryLock(t.Context(), "{a}:fencing", time.Minute)
		require.ErrorContains(t, err, "reserved")
		require.NotErrorIs(t, err, redlock.ErrNotObtained)
	}
	drain(t, l)
	v, _ := c.servers[0].Get("{a}:fencing")
	assert.Equal(t, "1", v, "the counter is untouched")
}

// A token's low bits name the server that owned it by a label every process
// agrees on, however it orders the nodes: two Lockers over the same servers,
// listed in different orders, label each owner alike.
func TestTokenLabelsDoNotDependOnTheNodeOrder(t *testing.T) {
	c := newCluster(t, 3)
	inOrder := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true})
	var shuffled []redlock.Node
	for _, i := range []int{2, 0, 1} {
		shuffled = append(shuffled, newClient(t, c.servers[i].Addr()))
	}
	reordered := newLocker(t, shuffled, &redlock.Options{Fencing: true})

	labels := []map[int]uint64{{}, {}} // per Locker: server -> label seen
	for round := range 20 {
		for li, l := range []*redlock.Locker{inOrder, reordered} {
			drain(t, inOrder) // both: a straggling acquisition of either would INCR the counters set below
			drain(t, reordered)
			// Counters base+i: the owner (the highest among the nodes that
			// decided) is the server whose INCR result is t.
			base := 1000 * (2*round + li + 1)
			for i, m := range c.servers {
				require.NoError(t, m.Set("{k}:fencing", strconv.Itoa(base+i)))
			}
			lease, err := l.TryLock(t.Context(), "k", time.Minute)
			require.NoError(t, err)
			require.NoError(t, lease.Unlock(t.Context()))
			owner := int(lease.Token()>>8) - base - 1
			require.True(t, owner >= 0 && owner < 3, "token %d", lease.Token())
			labels[li][owner] = lease.Token() & 0xff
		}
	}
	seen := map[uint64]int{}
	for server, label := range labels[0] {
		if other, ok := labels[1][server]; ok {
			assert.Equal(t, label, other, "server %d: labelled %d by one Locker and %d by the other", server, label, other)
		}
		if s, dup := seen[label]; dup {
			t.Errorf("servers %d and %d share label %d", s, server, label)
		}
		seen[label] = server
	}
}

// A durability check that the network cut short decides nothing: TryLock
// returns that failure (not ErrNotDurable), and Lock retries until the nodes
// answer. A verdict the nodes gave (CONFIG GET refused) is ErrNotDurable,
// which Lock returns at once.
func TestRequireDurableRetriesNetworkFailures(t *testing.T) {
	c := newCluster(t, 3)
	var failing atomic.Int32
	failing.Store(6) // two checks' worth of nodes
	errReset := errors.New("connection reset by peer")
	l := newLocker(t, c.nodes(func(_ int, n redlock.Node) redlock.Node {
		return &configNode{Node: n, wait: func(context.Context) error {
			if failing.Add(-1) >= 0 {
				return errReset
			}
			return nil
		}}
	}), &redlock.Options{Fencing: true, RequireDurable: true})

	_, err := l.TryLock(t.Context(), "k", time.Minute)
	require.ErrorContains(t, err, "cannot tell whether a majority of nodes is durable")
	require.NotErrorIs(t, err, redlock.ErrNotDurable)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lease, err := l.Lock(ctx, "k", time.Minute)
	require.NoError(t, err, "Lock retries a check the network cut short")
	require.NoError(t, lease.Unlock(t.Context()))

	refusing := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true, RequireDurable: true}) // miniredis: no CONFIG
	start := time.Now()
	_, err = refusing.Lock(ctx, "k", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotDurable)
	assert.Less(t, time.Since(start), 20*time.Second, "Lock returned the nodes' verdict at once")
}

// In a steady deployment every node increments in step, and a fenced
// acquisition takes one round trip: phase 1 alone (the fast path). A
// minority that misses an increment (its nodes refused) leaves the majority
// in step: still one round trip. The next acquisition that a lagging node
// helps decide finds the counters apart and runs phase 2, which brings every
// granting node up to t; the one after takes one round trip again. Tokens
// grow throughout. The events' Detail says which.
//
// Counters only ever grow (a node that lost its counters is quarantined by
// the node guard), so the faults here are refusals and a lost reply, never a
// counter set lower: a majority's counters set back by hand would break the
// order fencing promises, and no test should expect otherwise.
func TestFencedAcquisitionsTakeOneRoundTripWhenCountersAgree(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 5)
	const (
		healthy   int32 = iota
		refuse34        // nodes 3 and 4 refuse every script
		lostReply       // node 2 runs the script and its reply is lost
	)
	var fault atomic.Int32
	rec := &recorder{}
	l := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
		return &hookNode{Node: n,
			beforeScript: func(context.Context, []string, []any) error {
				if fault.Load() == refuse34 && i >= 3 {
					return errInjected
				}
				return nil
			},
			afterScript: func([]string, []any) error {
				if fault.Load() == lostReply && i == 2 {
					return errInjected
				}
				return nil
			}}
	}), &redlock.Options{Fencing: true, Observer: rec})
	var prev uint64
	acquire := func(f int32) string {
		t.Helper()
		rec.reset()
		fault.Store(f)
		lease, err := l.TryLock(ctx, "k", time.Minute)
		fault.Store(healthy)
		require.NoError(t, err)
		require.Greater(t, lease.Token(), prev)
		prev = lease.Token()
		// Phase 2 reaches a node whose phase-1 reply came after the
		// decision only after that reply: let it land while the key still
		// holds the lease (an unlock first would leave that node's counter
		// behind, one round trip more for a later acquisition).
		drain(t, l)
		require.NoError(t, lease.Unlock(ctx))
		drain(t, l)
		return rec.one(t, redlock.OpAcquire).Detail
	}
	for range 3 {
		assert.Equal(t, redlock.FencedInOneRoundTrip, acquire(healthy), "counters in step")
	}
	assert.Equal(t, redlock.FencedInOneRoundTrip, acquire(refuse34),
		"nodes 3 and 4 missed an increment: the three that decided agree")
	assert.Equal(t, redlock.FencedInTwoRoundTrips, acquire(lostReply),
		"nodes 3 and 4 lag, node 2's reply is lost: every majority that decides holds a lagging node")
	assert.Equal(t, redlock.FencedInOneRoundTrip, acquire(healthy), "back in step")
}

// The schedule tests lose and delay phase 2 by recognizing its scripts
// (isPhase2Script): phase 2 of a one-key lease and of a multi-key lease
// (the scripts that write token records) must both be recognized, and
// nothing else, or those faults would silently stop being injected.
func TestScheduleFaultsRecognizePhaseTwo(t *testing.T) {
	c := newCluster(t, 3)
	var mu sync.Mutex
	recognized := map[int]int{} // phase 2's scripts recognized, by the lease's key count
	l := newLocker(t, c.nodes(func(_ int, n redlock.Node) redlock.Node {
		return &hookNode{Node: n, beforeScript: func(_ context.Context, keys []string, args []any) error {
			if strings.HasPrefix(keys[0], "redlock:memory") {
				return nil // the guard's
			}
			records := slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, ":fencing-token") })
			mu.Lock()
			defer mu.Unlock()
			if got := isPhase2Script(keys, args); got != records {
				t.Errorf("isPhase2Script(%q, %v) = %v", keys, args, got)
			} else if got {
				recognized[len(keys)/3]++
			}
			return nil
		}}
	}), withHooks(&redlock.Options{Fencing: true}, unsafelocker.Hooks{AlwaysFencingPhase2: true}))
	one, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	multi, err := l.TryLockMulti(t.Context(), []string{"a", "b"}, time.Minute)
	require.NoError(t, err)
	drain(t, l)
	require.NoError(t, one.Unlock(t.Context()))
	require.NoError(t, multi.Unlock(t.Context()))
	mu.Lock()
	defer mu.Unlock()
	assert.Positive(t, recognized[1], "phase 2 of a one-key lease")
	assert.Positive(t, recognized[2], "phase 2 of a two-key lease")
}

// The seeded explorations run their seeds, then more while the test has
// not seen enough, and never past moreSeedsAtMost times their seeds.
func TestEachSeedGoesOnUntilEnough(t *testing.T) {
	for _, c := range []struct {
		name       string
		enoughFrom int // the seeds after which enough says yes; 0: never
		want       int
	}{
		{"enough at once", 1, 10},
		{"enough later", 25, 25},
		{"never enough", 0, moreSeedsAtMost * 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var ran []uint64
			seeds := eachSeed(10, 1, func() int { return 0 }, func(_ int, seed uint64) {
				mu.Lock()
				defer mu.Unlock()
				ran = append(ran, seed)
			}, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return c.enoughFrom > 0 && len(ran) >= c.enoughFrom
			})
			mu.Lock()
			defer mu.Unlock()
			// One worker: a seed is taken only once the one before it ran,
			// give or take the one the generator has ready.
			assert.InDelta(t, c.want, seeds, 1)
			assert.Equal(t, seeds, len(ran))
			for i, s := range ran {
				assert.Equal(t, uint64(i+1), s)
			}
		})
	}
}
