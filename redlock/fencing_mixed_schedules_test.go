package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/redlock"
)

// The fencing schedules of TestFencingOrderUnderRandomSchedules, with
// single-key leases of a key mixed with multi-key leases that include it
// (so one counter is raised by both kinds of phase 1 and phase 2), and the
// same schedules without key loss checked for mutual exclusion.

// mixState is one schedule's seeded faults: lost phase-2 messages (single
// or multi-key, lost before or after the node applied them), lost replies
// of other scripts, late replies, and (vanish) the schedule's key lost on
// one node alone.
type mixState struct {
	key    string
	mu     *sync.Mutex
	rnd    *rand.Rand
	scale  time.Duration
	vanish bool
	// unsure: (node address, value) of releases that failed on their own
	// (not by an injected fault after they applied): the key may stay
	// there until its TTL, which miniredis does not count down here
	unsure map[string]bool
	// unsureNodes: the nodes where the Lockers reported a release or an
	// unlock failed, at once or late, other than by an injected fault
	// (their Observer): a release refused
	// before it was sent (a node whose batch stalled) never reaches the
	// fault hooks, and its key lives out its TTL the same way
	unsureNodes map[int]bool
}

// Observe records the nodes where a release or unlock did not succeed (see
// unsureNodes): the Lockers of a schedule report to their mixState.
func (s *mixState) Observe(e redlock.Event) {
	switch e.Op {
	case redlock.OpRelease, redlock.OpUnlock, redlock.OpLateFailure:
	default:
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range e.Nodes {
		// An unanswered release that failed later is reported again,
		// as a late failure; one that succeeded left nothing. A failure
		// the fault hooks made is theirs to record (mayKeep), by value.
		failed := n.Outcome == redlock.Failed
		if e.Op == redlock.OpLateFailure {
			failed = e.Of == redlock.OpRelease || e.Of == redlock.OpUnlock
		}
		if failed && !errors.Is(n.Err, errLostMessage) {
			s.unsureNodes[n.Node] = true
		}
	}
}

// mayKeep records, where err is set, that the node at addr may keep the
// value argv[0] until its TTL: its release failed, or may not have been sent.
func (s *mixState) mayKeep(addr string, argv []any, err error) {
	if err == nil || len(argv) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unsure[addr+"|"+fmt.Sprint(argv[0])] = true
}

// isRelease tells a release script (release.lua, of one key or several: no
// counter or token record among its keys, every argument a string) from
// the others a schedule sends (acquisitions send the TTL as a number;
// phase 2 names counters; the token record names records).
func isRelease(keys []string, argv []any) bool {
	if slices.ContainsFunc(keys, func(k string) bool {
		return strings.HasSuffix(k, ":fencing") || strings.Contains(k, ":fencing-token")
	}) {
		return false
	}
	for _, a := range argv {
		if _, ok := a.(string); !ok {
			return false
		}
	}
	return true
}

func (s *mixState) chance(p float64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rnd.Float64() < p
}

func (s *mixState) delay() {
	s.mu.Lock()
	d := time.Duration(0)
	if s.rnd.Float64() < 0.2 {
		d = time.Duration(s.rnd.Int64N(int64(15 * time.Millisecond * s.scale)))
	}
	s.mu.Unlock()
	time.Sleep(d)
}

// fault applies s's faults to one script call on srv; run sends it.
func (s *mixState) fault(srv *miniredis.Miniredis, keys []string, argv []any, run func() error) error {
	phase2 := isPhase2Script(keys, argv)
	if phase2 && s.chance(0.15) {
		return errLostMessage
	}
	s.delay()
	err := run()
	if isRelease(keys, argv) {
		s.mayKeep(srv.Addr(), argv, err)
	}
	if err == nil && s.chance(map[bool]float64{true: 0.1, false: 0.03}[phase2]) {
		err = errLostMessage // applied, but the reply is lost
	}
	if s.vanish && s.chance(0.05) {
		srv.Del(s.key)
	}
	return err
}

var errSlowCall = errors.New("slow call")

// mixNode injects a schedule's faults per call (the direct transport).
type mixNode struct {
	redlock.Node
	srv *miniredis.Miniredis
	st  *mixState
}

func (n mixNode) Do(ctx context.Context, args ...any) *redis.Cmd {
	if !guardCompanion(args) {
		n.st.delay()
	}
	return n.Node.Do(ctx, args...)
}

func (n mixNode) script(ctx context.Context, keys []string, args []any, run func() *redis.Cmd) *redis.Cmd {
	if strings.HasPrefix(keys[0], "redlock:memory") {
		return run()
	}
	var cmd *redis.Cmd
	began := time.Now()
	err := n.st.fault(n.srv, keys, args, func() error { cmd = run(); return cmd.Err() })
	if !isRelease(keys, args) && time.Since(began) > 20*time.Millisecond*n.st.scale {
		// So slow that the release, which waits for this call to
		// return, may have given up unsent: the key then lives out its
		// TTL (see checkNothingLeft).
		n.st.mayKeep(n.srv.Addr(), args, errSlowCall)
	}
	if cmd == nil {
		cmd = redis.NewCmd(ctx)
	}
	if err != nil {
		cmd.SetErr(err)
	}
	return cmd
}

func (n mixNode) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return n.script(ctx, keys, args, func() *redis.Cmd { return n.Node.EvalSha(ctx, sha, keys, args...) })
}

func (n mixNode) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return n.script(ctx, keys, args, func() *redis.Cmd { return n.Node.Eval(ctx, src, keys, args...) })
}

// mixHook injects a schedule's faults per batch of a pipelined client.
type mixHook struct {
	srv *miniredis.Miniredis
	st  **mixState // the worker's current schedule
}

func (h *mixHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *mixHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, ours := cmd.(*redis.Cmd); !ours {
			return next(ctx, cmd)
		}
		return h.batch(ctx, []redis.Cmder{cmd}, func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmds[0]) })
	}
}

func (h *mixHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch cmds[0].Name() {
		case "hello", "client":
			return next(ctx, cmds)
		}
		return h.batch(ctx, cmds, next)
	}
}

func (h *mixHook) batch(ctx context.Context, cmds []redis.Cmder, next func(context.Context, []redis.Cmder) error) error {
	st := *h.st
	send := make([]redis.Cmder, 0, len(cmds))
	var phase2 []bool
	for _, cmd := range cmds {
		keys, argv, ok := scriptParts(cmd)
		p2 := ok && isPhase2Script(keys, argv)
		if p2 && st.chance(0.15) {
			cmd.SetErr(errLostMessage)
			continue
		}
		send = append(send, cmd)
		phase2 = append(phase2, p2)
	}
	st.delay()
	var err error
	if len(send) > 0 {
		err = next(ctx, send)
	}
	for i, cmd := range send {
		keys, argv, ok := scriptParts(cmd)
		if ok && isRelease(keys, argv) {
			own := cmd.Err()
			if own == nil && len(send) == 1 {
				own = err // a lone command's error reaches it after the hooks (Client.Process)
			}
			st.mayKeep(h.srv.Addr(), argv, own)
		}
		if ok && cmd.Err() == nil && st.chance(map[bool]float64{true: 0.1, false: 0.03}[phase2[i]]) {
			cmd.SetErr(errLostMessage)
		}
	}
	if st.vanish && st.chance(0.05) {
		h.srv.Del(st.key)
	}
	return err
}

// mixNodes returns the nodes of Locker k (of 3) for schedule st.
type mixNodes func(k int, st *mixState) []redlock.Node

// mixTransports are the two transports a mixed schedule runs over: the
// direct one (a wrapping Node) and the auto-pipeline (a go-redis hook).
func mixTransports(t *testing.T, c *cluster) map[string]func() mixNodes {
	return map[string]func() mixNodes{
		"direct": func() mixNodes {
			return func(_ int, st *mixState) []redlock.Node {
				return c.nodes(func(i int, n redlock.Node) redlock.Node { return mixNode{Node: n, srv: c.servers[i], st: st} })
			}
		},
		"auto-pipeline": func() mixNodes {
			current := new(*mixState)
			clients := hookedClients(t, c.servers, func(m *miniredis.Miniredis) redis.Hook { return &mixHook{srv: m, st: current} })
			return func(k int, st *mixState) []redlock.Node {
				if k == 0 {
					*current = st
				}
				return clients[k]
			}
		},
	}
}

// mixed is one acquisition in a schedule: when it began and returned, its
// keys, its token of the schedule's key, and when it was given up (Unlock
// called, or its validity ended, whichever came first).
type mixed struct {
	start, end, until time.Time
	keys              []string
	token             uint64
}

// runMixedSchedule runs seed's schedule: three Lockers, four acquisitions
// each, every one a single-key lease of the schedule's key, a multi-key
// lease of it and one or two other keys, or a multi-key lease of other
// keys only (which shares the others' counters); held for a random pause,
// sometimes past its validity, then unlocked.
func runMixedSchedule(nodesOf mixNodes, key string, seed uint64, scale time.Duration, hooks unsafelocker.Hooks, vanish bool) ([]mixed, *mixState, error) {
	others := []string{key + ":x", key + ":y"}
	var mu sync.Mutex
	st := &mixState{key: key, mu: &mu, rnd: rand.New(rand.NewPCG(seed, 0)), scale: scale, vanish: vanish, unsure: map[string]bool{}, unsureNodes: map[int]bool{}}
	var got []mixed
	var wg sync.WaitGroup
	for k := range 3 {
		l, err := redlock.New(nodesOf(k, st), withHooks(&redlock.Options{Fencing: true, NodeTimeout: 10 * time.Millisecond * scale, NoWakeUps: true, Observer: st}, hooks))
		if err != nil {
			return nil, nil, err
		}
		if err := l.Warm(context.Background()); err != nil {
			return nil, nil, err
		}
		wg.Go(func() {
			defer l.Drain(context.Background())
			for range 4 {
				mu.Lock()
				var keys []string
				switch st.rnd.IntN(4) {
				case 0:
					keys = []string{key}
				case 1:
					keys = []string{others[st.rnd.IntN(2)], key}
				case 2:
					keys = []string{others[1], key, others[0]}
				case 3:
					keys = others
				}
				pause := time.Duration(st.rnd.Int64N(int64(50 * time.Millisecond * scale)))
				mu.Unlock()
				start := time.Now()
				var lease *redlock.Lease
				if len(keys) == 1 {
					lease, err = l.TryLock(context.Background(), key, 40*time.Millisecond*scale)
				} else {
					lease, err = l.TryLockMulti(context.Background(), keys, 40*time.Millisecond*scale)
				}
				end := time.Now()
				if err != nil {
					continue
				}
				a := mixed{start: start, end: end, until: time.Now().Add(lease.Validity()), keys: lease.Keys(), token: lease.TokenOf(key)}
				time.Sleep(pause) // sometimes past the lease's expiry
				a.until = minTime(a.until, time.Now())
				mu.Lock()
				got = append(got, a)
				mu.Unlock()
				_ = lease.Unlock(context.Background())
			}
		})
	}
	wg.Wait()
	return got, st, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// checkOrder checks Order and Uniqueness of the schedule key's tokens.
func checkOrder(seed uint64, key string, got []mixed) error {
	tokens := map[uint64]bool{}
	for _, a := range got {
		if !slices.Contains(a.keys, key) {
			continue
		}
		if a.token == 0 {
			return fmt.Errorf("seed %d: a lease of %v has no token of %s", seed, a.keys, key)
		}
		if tokens[a.token] {
			return fmt.Errorf("seed %d: token %d of %s issued twice", seed, a.token, key)
		}
		tokens[a.token] = true
		for _, b := range got {
			if slices.Contains(b.keys, key) && a.end.Before(b.start) && b.token <= a.token {
				return fmt.Errorf("seed %d: order broken: %v got token %d of %s after %v's %d returned", seed, b.keys, b.token, key, a.keys, a.token)
			}
		}
	}
	return nil
}

// checkExclusion checks that no two leases that share a key held it at
// once: each holds from its acquisition's return until its validity ran
// out or it was unlocked. (miniredis expires nothing by itself here, so a
// key is free only once its holder released it, or a fault dropped it.)
func checkExclusion(seed uint64, got []mixed) error {
	for i, a := range got {
		for _, b := range got[i+1:] {
			shared := slices.ContainsFunc(a.keys, func(k string) bool { return slices.Contains(b.keys, k) })
			if shared && a.end.Before(b.until) && b.end.Before(a.until) {
				return fmt.Errorf("seed %d: %v and %v both held a key at once", seed, a.keys, b.keys)
			}
		}
	}
	return nil
}

// checkNothingLeft checks that once a schedule's Lockers are drained, no
// node keeps any of its lock keys: every lease was unlocked and every
// failed attempt released, whole, except where that release itself failed
// (a late reply past its timeout, or a release the Lockers reported failed
// on that node: the key then lives out its TTL, which
// miniredis does not count down here).
func checkNothingLeft(c *cluster, st *mixState, seed uint64) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, m := range c.servers {
		for _, k := range []string{st.key, st.key + ":x", st.key + ":y"} {
			if v, err := m.Get(k); err == nil && !st.unsure[m.Addr()+"|"+v] && !st.unsureNodes[i] {
				return fmt.Errorf("seed %d: node %d keeps %s (value %s) after every lease was unlocked", seed, i, k, v)
			}
		}
	}
	return nil
}

// exploreMixed runs seeds (see eachSeed for how many), parallel at a
// time, with counters preset (counterPresets) for the schedule's key
// (prefix:seed) and, shifted, for the others, and returns what it saw.
func exploreMixed(c *cluster, prefix string, runs, parallel int, newWorker func() mixNodes, scale time.Duration, hooks unsafelocker.Hooks, vanish bool, enough func(explored) bool) explored {
	var mu sync.Mutex
	var seen explored
	seen.seeds = eachSeed(runs, parallel, newWorker, func(nodes mixNodes, seed uint64) {
		key := fmt.Sprintf("%s:%d", prefix, seed)
		presetCounters(c.servers, key, seed)
		presetCounters(c.servers, key+":x", seed+1)
		presetCounters(c.servers, key+":y", seed+2)
		got, st, err := runMixedSchedule(nodes, key, seed, scale, hooks, vanish)
		if err == nil {
			err = checkOrder(seed, key, got)
		}
		if err == nil && !vanish {
			err = checkExclusion(seed, got)
		}
		if err == nil && !vanish {
			err = checkNothingLeft(c, st, seed)
		}
		mu.Lock()
		defer mu.Unlock()
		seen.acquired += len(got)
		for _, a := range got {
			if len(a.keys) > 1 && slices.Contains(a.keys, key) {
				seen.multi++
			}
		}
		if err != nil {
			seen.failed = append(seen.failed, err.Error())
		}
	}, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return enough(seen)
	})
	return seen
}

func mixedCluster(t *testing.T) *cluster {
	c := newCluster(t, 5)
	for i, m := range c.servers {
		c.clients[i] = redis.NewClient(&redis.Options{Addr: m.Addr(), PoolSize: 256})
		t.Cleanup(func() { c.clients[i].Close() })
	}
	return c
}

func mixedBudget() (runs, parallel int, scale time.Duration) {
	switch {
	case raceEnabled:
		return 24, 8, 8
	case testing.Short():
		return 150, 4, 1
	}
	return 300, 6, 1
}

// Order and Uniqueness of one key's tokens hold across its single-key and
// multi-key leases, under lost phase-2 messages, late replies and the key
// lost on one node, over both transports, with the fast path (the
// library's choice) and with phase 2 always.
func TestMixedSingleAndMultiKeyTokensKeepOrder(t *testing.T) {
	choosesItsTransports(t)
	runs, parallel, scale := mixedBudget()
	c := mixedCluster(t)
	for name, worker := range mixTransports(t, c) {
		for _, mode := range []string{"fast", "always"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				hooks := unsafelocker.Hooks{AlwaysFencingPhase2: mode == "always"}
				got := exploreMixed(c, "order/"+name+"/"+mode, runs, parallel, worker, scale, hooks, true, func(e explored) bool { return e.multi > runs/10 })
				t.Logf("%d seeded schedules, %d acquisitions of the key checked, %d of them multi-key", got.seeds, got.acquired, got.multi)
				for _, f := range got.failed {
					t.Error(f)
				}
				assert.Greater(t, got.multi, runs/10, "too few multi-key acquisitions of the key for the check to mean much")
			})
		}
	}
}

// The control: the same mixed schedules with phase 2 removed (the maximum
// of the phase-1 counters alone) break Order, so the harness can see it.
func TestMixedSchedulesWithoutPhaseTwoBreakOrder(t *testing.T) {
	choosesItsTransports(t)
	runs, parallel, scale := 200, 4, time.Duration(1)
	if raceEnabled {
		runs, parallel, scale = 40, 8, 8
	}
	c := mixedCluster(t)
	got := exploreMixed(c, "control", runs, parallel, mixTransports(t, c)["direct"], scale, unsafelocker.Hooks{NoFencingPhase2: true}, true, func(e explored) bool { return len(e.failed) > 0 })
	t.Logf("without phase 2: %d of %d schedules broke Order or Uniqueness; the first: %s", len(got.failed), got.seeds, strings.Join(got.failed[:min(1, len(got.failed))], ""))
	require.NotEmpty(t, got.failed)
}

// Mutual exclusion: without key loss, no two leases that share a key (a
// single-key lease and multi-key leases naming it, or two multi-key leases
// overlapping in one key) ever hold it at once, under late replies and
// replies lost after the node applied them, over both transports; and
// once all is unlocked and drained, no node keeps a key.
func TestMixedSingleAndMultiKeyLeasesExclude(t *testing.T) {
	choosesItsTransports(t)
	runs, parallel, scale := mixedBudget()
	c := mixedCluster(t)
	for name, worker := range mixTransports(t, c) {
		t.Run(name, func(t *testing.T) {
			got := exploreMixed(c, "exclusion/"+name, runs, parallel, worker, scale, unsafelocker.Hooks{}, false, func(e explored) bool { return e.acquired > runs })
			t.Logf("%d seeded schedules, %d acquisitions checked, %d multi-key with the key", got.seeds, got.acquired, got.multi)
			for _, f := range got.failed {
				t.Error(f)
			}
			assert.Greater(t, got.acquired, runs, "too few acquisitions for the check to mean much")
		})
	}
}
