package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/cryptotest"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/redlock"
)

// cluster is n independent in-process Redis servers (miniredis runs real Lua)
// with a go-redis client each.
type cluster struct {
	servers []*miniredis.Miniredis
	clients []*redis.Client
}

func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	c := &cluster{}
	for range n {
		m := redistest.Miniredis(t)
		trust(m)
		c.servers = append(c.servers, m)
		c.clients = append(c.clients, newClient(t, m.Addr()))
	}
	return c
}

// trust marks m's memory whole, as Locker.TrustNodes would: miniredis has
// no INFO server, so to the node guard its memory begins at its first use.
func trust(m *miniredis.Miniredis) {
	_ = m.Set("redlock:memory", "0 ?")
}

// lockKeys returns m's keys but the node guard's marker.
func lockKeys(m *miniredis.Miniredis) []string {
	var keys []string
	for _, k := range m.Keys() {
		if k != "redlock:memory" {
			keys = append(keys, k)
		}
	}
	return keys
}

// guardCompanion reports whether a Do call is one of the node guard's
// companions (PTTL or GET of its marker, SCRIPT EXISTS, TIME), which hookNode passes
// through unrecorded: the tests' hooks are about the lock's own commands.
func guardCompanion(args []any) bool {
	name, _ := args[0].(string)
	switch strings.ToLower(name) {
	case "time", "script":
		return true
	case "get", "pttl":
		k, _ := args[1].(string)
		return strings.HasPrefix(k, "redlock:memory")
	}
	return false
}

func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { cl.Close() })
	return cl
}

// newClusterClient is newClient's Redis Cluster client, with the same
// timeouts (go-redis's 3 s default read timeout is not enough for a
// miniredis reply under the race detector beside CPU burners, where a
// TrustNodes once timed out).
func newClusterClient(t testing.TB, addr string) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// shortReadTimeout gives a client a one-second read and write timeout, for
// tests whose silent or black-holed nodes are decided without at
// NodeTimeout: the calls left waiting there end at the read timeout, and
// the Locker's Drain at the test's end waits for them (ten seconds at
// newClient's timeouts).
func shortReadTimeout(o *redis.Options) {
	o.ReadTimeout, o.WriteTimeout = time.Second, time.Second
}

// nodes returns the cluster's clients as Nodes, each passed through wrap if
// given (wrap may return its argument).
func (c *cluster) nodes(wrap func(i int, n redlock.Node) redlock.Node) []redlock.Node {
	out := make([]redlock.Node, len(c.clients))
	for i, cl := range c.clients {
		out[i] = cl
		if wrap != nil {
			out[i] = wrap(i, cl)
		}
	}
	return out
}

// holding returns the indexes of servers where key holds value.
func (c *cluster) holding(key, value string) []int {
	var idx []int
	for i, m := range c.servers {
		if v, err := m.Get(key); err == nil && v == value {
			idx = append(idx, i)
		}
	}
	return idx
}

// setOther makes servers idx hold key for another client's value.
func (c *cluster) setOther(t *testing.T, key string, idx ...int) {
	t.Helper()
	for _, i := range idx {
		if err := c.servers[i].Set(key, "someone-else"); err != nil {
			t.Fatal(err)
		}
		c.servers[i].SetTTL(key, time.Minute)
	}
}

// withTransport applies REDLOCK_TEST_TRANSPORT to opts: "direct" sets
// Options.NoAutoPipeline, so that scripts/test.sh can run the tests over both
// of the coordinator's transports. (Nodes that are not *redis.Client, such
// as hookNode, always take the direct one.)
//
// Options without a NodeTimeout get 5s instead of the 50ms default: these
// tests run under the race detector beside other packages on two cores,
// where 50ms is sometimes too short for a reply. The tests about timing set
// NodeTimeout themselves.
func withTransport(opts *redlock.Options) *redlock.Options {
	var o redlock.Options
	if opts != nil {
		o = *opts
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = 5 * time.Second
	}
	if os.Getenv("REDLOCK_TEST_TRANSPORT") == "direct" {
		o.NoAutoPipeline = true
	}
	return &o
}

// withHooks is a copy of opts (nil: the defaults) whose Lockers skip the
// steps h names or act where it says (internal/unsafelocker): the
// package's controls, one Locker at a time.
func withHooks(opts *redlock.Options, h unsafelocker.Hooks) *redlock.Options {
	o := redlock.Options{}
	if opts != nil {
		o = *opts
	}
	unsafelocker.Set(&o, h)
	return &o
}

func newLocker(t *testing.T, nodes []redlock.Node, opts *redlock.Options) *redlock.Locker {
	t.Helper()
	l, err := redlock.New(nodes, withTransport(opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := l.Drain(ctx); err != nil {
			t.Errorf("Drain: %v", err)
		}
	})
	return l
}

func drain(t *testing.T, l *redlock.Locker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := l.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

// proxied puts a faultnet proxy in front of each server and returns clients
// that go through them.
func (c *cluster) proxied(t *testing.T) ([]*faultnet.Proxy, []redlock.Node) {
	t.Helper()
	return c.proxiedWith(t, nil)
}

// proxiedWith is proxied with each client's options passed through adjust
// (if set) first.
func (c *cluster) proxiedWith(t *testing.T, adjust func(*redis.Options)) ([]*faultnet.Proxy, []redlock.Node) {
	t.Helper()
	var proxies []*faultnet.Proxy
	var nodes []redlock.Node
	for _, m := range c.servers {
		p, err := faultnet.Listen(m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies = append(proxies, p)
		if adjust == nil {
			nodes = append(nodes, newClient(t, p.Addr()))
			continue
		}
		o := &redis.Options{Addr: p.Addr(), ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
		adjust(o)
		cl := redis.NewClient(o)
		t.Cleanup(func() { cl.Close() })
		nodes = append(nodes, cl)
	}
	return proxies, nodes
}

// isExtension reports whether a script's arguments are an extension's
// (extend.lua: value, milliseconds, heal, number of keys).
func isExtension(args []any) bool {
	return len(args) == 4 && (args[2] == "1" || args[2] == "0")
}

// isFencedAcquisition reports whether a script's arguments are a fenced
// acquisition's (acquire.lua: value, milliseconds, number of keys, "fence").
func isFencedAcquisition(args []any) bool {
	return len(args) == 4 && args[3] == "fence"
}

// hookNode wraps a Node and calls hooks around its commands, for fault
// injection without a network (like bsm/redislock's flakyScripter).
type hookNode struct {
	redlock.Node
	mu sync.Mutex
	// beforeDo runs before Do (the acquiring SET); an error is returned
	// instead of sending the command.
	beforeDo func(ctx context.Context, args []any) error
	// afterDo runs after Do has been answered; an error replaces the reply.
	afterDo func(args []any) error
	// beforeScript runs before EvalSha/Eval.
	beforeScript func(ctx context.Context, keys []string, args []any) error
	// afterScript runs after EvalSha/Eval has been answered; an error
	// replaces the reply (the node ran the script, the reply was lost).
	afterScript func(keys []string, args []any) error
	// evalShaDelay delays every EVALSHA (not EVAL) by this much.
	evalShaDelay time.Duration
	sets         [][]any // recorded Do arguments
	scriptKeys   [][]string
}

func (h *hookNode) Do(ctx context.Context, args ...any) *redis.Cmd {
	if guardCompanion(args) {
		return h.Node.Do(ctx, args...)
	}
	h.mu.Lock()
	h.sets = append(h.sets, args)
	h.mu.Unlock()
	if h.beforeDo != nil {
		if err := h.beforeDo(ctx, args); err != nil {
			cmd := redis.NewCmd(ctx, args...)
			cmd.SetErr(err)
			return cmd
		}
	}
	cmd := h.Node.Do(ctx, args...)
	if h.afterDo != nil {
		if err := h.afterDo(args); err != nil {
			cmd.SetErr(err)
		}
	}
	return cmd
}

func (h *hookNode) script(ctx context.Context, keys []string, args []any) error {
	h.mu.Lock()
	h.scriptKeys = append(h.scriptKeys, keys)
	h.mu.Unlock()
	if h.beforeScript != nil {
		return h.beforeScript(ctx, keys, args)
	}
	return nil
}

func (h *hookNode) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if strings.HasPrefix(keys[0], "redlock:memory") { // the node guard's examination
		return h.Node.EvalSha(ctx, sha, keys, args...)
	}
	if err := h.script(ctx, keys, args); err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	time.Sleep(h.evalShaDelay)
	return h.answered(h.Node.EvalSha(ctx, sha, keys, args...), keys, args)
}

// answered applies afterScript to a script's reply.
func (h *hookNode) answered(cmd *redis.Cmd, keys []string, args []any) *redis.Cmd {
	if h.afterScript != nil {
		if err := h.afterScript(keys, args); err != nil {
			cmd.SetErr(err)
		}
	}
	return cmd
}

func (h *hookNode) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	if strings.HasPrefix(keys[0], "redlock:memory") {
		return h.Node.Eval(ctx, src, keys, args...)
	}
	if err := h.script(ctx, keys, args); err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return h.answered(h.Node.Eval(ctx, src, keys, args...), keys, args)
}

func (h *hookNode) recordedSets() [][]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]any(nil), h.sets...)
}

var errInjected = errors.New("injected node failure")

// valueOf returns the value the last SET recorded on h carried.
func valueOf(t *testing.T, h *hookNode) string {
	t.Helper()
	sets := h.recordedSets()
	if len(sets) == 0 {
		t.Fatal("no SET recorded")
	}
	return sets[len(sets)-1][2].(string)
}

// choosesItsTransports skips t in a run that sets REDLOCK_TEST_TRANSPORT
// (scripts/test.sh's run over the direct transport): t builds its Lockers
// over both transports itself, so that run would only repeat it, at the
// cost of minutes of the race detector's time.
func choosesItsTransports(t *testing.T) {
	t.Helper()
	if v := os.Getenv("REDLOCK_TEST_TRANSPORT"); v != "" {
		t.Skipf("REDLOCK_TEST_TRANSPORT=%s: this test runs both transports itself, in the run without it", v)
	}
}

// inVirtualTime runs f in a synctest bubble, with crypto/rand drawing from
// a seeded stream (cryptotest.SetGlobalRandom). Under Go's FIPS 140-3
// "only" mode (the direct transport's run in scripts/test.sh), crypto/rand
// seeds each of its generators from a CPU-jitter source timed with the
// time package; in a bubble time stands still, the source fails its
// health tests, and the first random draw on a fresh generator (the
// Locker's owner value, the guard's nonce) panics with "fips140/drbg:
// failed to obtain initial entropy" (TestVirtualTimeStarvesFIPSEntropy).
// Not for parallel tests (SetGlobalRandom is process-wide).
func inVirtualTime(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	cryptotest.SetGlobalRandom(t, 1)
	synctest.Test(t, f)
}

// newVirtualCluster is newCluster for a test in virtual time (call it
// inside inVirtualTime's function): n miniredis servers that the clients
// reach over in-memory pipes (redistest.Dial, which hosts their scripts
// as redistest.Miniredis does, under FIPS-only mode too), whose keys
// expire on the bubble's clock (ClockTTL), so that a test that waits out
// TTLs and quarantines takes no wall time. Everything closes when t ends,
// inside the bubble.
func newVirtualCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{}
	for i := range n {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		t.Cleanup(m.Close)
		trust(m)
		cl := redis.NewClient(redistest.BubbleOptions(fmt.Sprintf("10.0.1.%d:6379", i+1), func() (net.Conn, error) { return redistest.Dial(m) }, -1))
		t.Cleanup(func() { cl.Close() })
		c.servers = append(c.servers, m)
		c.clients = append(c.clients, cl)
	}
	return c
}
