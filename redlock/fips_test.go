package redlock_test

import (
	"context"
	"crypto/fips140"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/fence"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock"
)

// Go's FIPS 140-3 "only" mode (GODEBUG=fips140=only) forbids SHA-1, which
// Redis names cached scripts by: the library computes none on the client
// and learns each script's digest from a server (see internal/luascript).
// Each test here runs in a process of its own (redistest.RunAlone): the
// mode is chosen when a process starts, and a digest learned serves the
// whole process, so that these tests start where a new program does, with
// no digest known (TestMain learns none there).

var transportsByEnv = map[string]bool{"auto-pipeline": false, "direct": true} // Options.NoAutoPipeline

// Under enforcement, every operation of the library (a guarded, fenced
// lock with its examinations, extension, check, a fenced write and read,
// a handle resumed, a multi-key lease, inspection, revocation, Warm,
// TrustNodes, and the same again once the servers lost their scripts)
// works on both transports: had the library computed a SHA-1, crypto/sha1
// would have panicked in its goroutine and ended the process. The
// servers (miniredis) compute theirs inside the bypass. The control: in
// the same process, a script wrapped by go-redis's redis.NewScript, which
// computes its digest on the client, panics.
func TestNoSHA1OnTheClientUnderFIPSOnly(t *testing.T) {
	if ran, out, err := redistest.RunAlone(t, "GODEBUG=fips140=only"); ran {
		require.NoError(t, err, out)
		return
	}
	require.True(t, fips140.Enforced(), "the child runs in FIPS 140-3 only mode")
	for name, direct := range transportsByEnv {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3)
			for _, m := range c.servers {
				m.Del("redlock:memory") // a new deployment: the guard examines and TrustNodes trusts
			}
			l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: true, NoAutoPipeline: direct})
			everyOperation(t, l, c)
			for _, cl := range c.clients {
				require.NoError(t, cl.ScriptFlush(t.Context()).Err()) // as after a restart
			}
			everyOperation(t, l, c)
		})
	}
	require.PanicsWithValue(t, "crypto/sha1: use of SHA-1 is not allowed in FIPS 140-only mode", func() {
		redis.NewScript(`return redis.call("GET", KEYS[1])`)
	}, "the control: a digest computed on the client")
}

// everyOperation runs each of the Locker's operations that sends a script
// once, and fails t on any error.
func everyOperation(t *testing.T, l *redlock.Locker, c *cluster) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, l.TrustNodes(ctx))
	require.NoError(t, l.Warm(ctx))
	lease, err := l.Lock(ctx, "fips:k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lease.Extend(ctx, time.Minute))
	require.NoError(t, lease.Check(ctx))
	guard := fence.NewRedis(c.clients[0])
	require.NoError(t, guard.Set(ctx, "fips:resource", "v", lease.Token()))
	v, ok, err := guard.Get(ctx, "fips:resource", lease.Token())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "v", v)
	_, err = l.Inspect(ctx, "fips:k")
	require.NoError(t, err)
	resumed, err := l.Resume(ctx, lease.Handle())
	require.NoError(t, err)
	require.NoError(t, resumed.Unlock(ctx))
	multi, err := l.LockMulti(ctx, []string{"fips:a", "fips:b"}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, multi.Extend(ctx, time.Minute))
	require.NoError(t, multi.Check(ctx))
	require.NoError(t, multi.Unlock(ctx))
	_, err = l.Revoke(ctx, "fips:a")
	require.NoError(t, err)
	drain(t, l)
}

// commands is a go-redis hook that counts, per node, the script commands
// a client sends (eval, evalsha, and script load), alone or in pipelines;
// with refuseLoad, it answers SCRIPT LOAD as an ACL that refuses it does,
// without sending it.
type commands struct {
	refuseLoad bool
	mu         sync.Mutex
	count      map[string]int
}

func (h *commands) record(cmd redis.Cmder) {
	name := strings.ToLower(cmd.Name())
	if name == "script" {
		name += " " + strings.ToLower(fmt.Sprint(cmd.Args()[1]))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count[name]++
}

func (h *commands) get(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count[name]
}

func (h *commands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		if h.refuseLoad && cmd.Name() == "script" && strings.EqualFold(fmt.Sprint(cmd.Args()[1]), "load") {
			err := redistest.ServerError("NOPERM User locker has no permissions to run the 'script|load' command")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.record(cmd)
		}
		return next(ctx, cmds)
	}
}

// counted is a cluster of n nodes whose clients h counts.
func counted(t *testing.T, n int, h *commands) *cluster {
	h.count = map[string]int{}
	c := newCluster(t, n)
	for _, cl := range c.clients {
		cl.AddHook(h)
	}
	return c
}

// cycles takes and releases key n times, each release drained.
func cycles(t *testing.T, l *redlock.Locker, key string, n int) {
	t.Helper()
	for range n {
		lease, err := l.TryLock(t.Context(), key, time.Minute)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(t.Context()))
		drain(t, l)
	}
}

// runAlonePerTransport runs t's body in a new process for each transport
// (REDLOCK_TEST_TRANSPORT, which withTransport reads); it reports true in
// the parent, once the children have passed.
func runAlonePerTransport(t *testing.T) (parent bool) {
	for name := range transportsByEnv {
		ran, out, err := redistest.RunAlone(t, "REDLOCK_TEST_TRANSPORT="+name)
		if !ran {
			return false
		}
		require.NoError(t, err, "%s transport:\n%s", name, out)
	}
	return true
}

// In a new process, without Warm, a script's first use on a node goes as
// EVAL with its source (one round trip, as no node has it), and one SCRIPT
// LOAD in the background learns the digest that node names; from then on
// it goes to that node as EVALSHA. A
// node that lost its scripts (SCRIPT FLUSH, a restart) answers NOSCRIPT,
// and the script follows as EVAL, on both transports. Only the release
// script is sent here: the guard is off, and acquisitions are SETs.
func TestScriptsGoAsEVALUntilAServerNamesTheirDigest(t *testing.T) {
	if runAlonePerTransport(t) {
		return
	}
	require.Empty(t, redlock.ScriptDigests()["release"], "a new process knows no digest")
	h := &commands{}
	c := counted(t, 3, h)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NoQuarantine: true})

	cycles(t, l, "k", 1)
	assert.Equal(t, [2]int{3, 0}, [2]int{h.get("eval"), h.get("evalsha")}, "the first release goes as EVAL on each node")
	digest, err := newClient(t, c.servers[0].Addr()).ScriptLoad(t.Context(), readScript(t, "release")).Result() // uncounted
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return slices.Equal(redlock.NodeDigests(l, "release"), []string{digest, digest, digest})
	}, 10*time.Second, time.Millisecond, "each node named the digest")
	assert.Empty(t, redlock.ScriptDigests()["release"], "no digest is trusted for every node")

	cycles(t, l, "k", 2)
	assert.Equal(t, [2]int{3, 6}, [2]int{h.get("eval"), h.get("evalsha")}, "then as EVALSHA")

	for _, cl := range c.clients {
		require.NoError(t, cl.ScriptFlush(t.Context()).Err())
	}
	cycles(t, l, "k", 1)
	assert.Equal(t, [2]int{6, 9}, [2]int{h.get("eval"), h.get("evalsha")}, "NOSCRIPT on each node, then EVAL")
	for _, m := range c.servers {
		assert.Empty(t, lockKeys(m), "released")
	}
	assert.Equal(t, 3, h.get("script load"), "one SCRIPT LOAD per script per node")
}

// A node whose ACL refuses SCRIPT LOAD still locks: its scripts go as
// EVAL, and the refusal is not asked again on each call (the learning
// backs off), on both transports. The control is the count of EVALs: one
// release per cycle on each node, all by source.
func TestARefusedScriptLoadCostsNothingPerCall(t *testing.T) {
	if runAlonePerTransport(t) {
		return
	}
	h := &commands{refuseLoad: true}
	c := counted(t, 3, h)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NoQuarantine: true})
	const n = 20
	cycles(t, l, "k", n)
	assert.Equal(t, 3*n, h.get("eval"), "every release went, by its source")
	assert.Zero(t, h.get("evalsha"))
	assert.Empty(t, redlock.ScriptDigests()["release"])
	assert.LessOrEqual(t, h.get("script load"), 2*3, "SCRIPT LOAD tried once on each node (or twice, if the cycles outlasted a backoff), not once per call")
	assert.GreaterOrEqual(t, h.get("script load"), 3)
}

// readScript reads one of the coordinator's scripts from its file.
func readScript(t *testing.T, name string) string {
	t.Helper()
	src, err := os.ReadFile("scripts/" + name + ".lua")
	require.NoError(t, err)
	return string(src)
}

// onScriptLoad is a go-redis hook that acts on a SCRIPT LOAD of src before
// it is sent, as a proxy in front of the node (or a node that is not
// Redis) would: act may rewrite the command's arguments, or answer it
// itself (done: nothing is sent). While off reports true (nil: never), it
// lets every command through: the proxy is gone.
type onScriptLoad struct {
	src string
	act func(args []any, cmd redis.Cmder) (done bool)
	off func() bool
}

// rewriteLoad loads to in place of from: the node then names to's digest
// for from.
func rewriteLoad(from, to string) onScriptLoad {
	return onScriptLoad{src: from, act: func(a []any, _ redis.Cmder) bool { a[2] = to; return false }}
}

// nameLoad answers SCRIPT LOAD of src with digest, sending nothing.
func nameLoad(src, digest string) onScriptLoad {
	return onScriptLoad{src: src, act: func(_ []any, cmd redis.Cmder) bool {
		cmd.(*redis.StringCmd).SetVal(digest)
		return true
	}}
}

func (h onScriptLoad) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h onScriptLoad) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if (h.off == nil || !h.off()) && len(a) == 3 && cmd.Name() == "script" && strings.EqualFold(fmt.Sprint(a[1]), "load") && a[2] == h.src {
			if h.act(a, cmd) {
				return nil
			}
		}
		return next(ctx, cmd)
	}
}

func (h onScriptLoad) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A digest one node names for a script is trusted on that node alone: a
// node that names another script's digest (here the release script's, for
// the check script: a rewriting proxy in front of one deployment) cannot
// make the honest nodes of another Locker run the release script by
// EVALSHA when they are sent Check. Were it the process's digest for every
// node (the first design of learned digests), Check would delete the
// lease's key on the honest nodes while reporting it held, and a second
// Locker would take the key: a lease granted twice.
func TestADigestOneNodeNamesDoesNotRunAnotherScriptOnTheOthers(t *testing.T) {
	if runAlonePerTransport(t) {
		return
	}
	ctx := t.Context()
	odd := redistest.Miniredis(t)
	trust(odd)
	oddClient := newClient(t, odd.Addr())
	oddClient.AddHook(rewriteLoad(readScript(t, "check"), readScript(t, "release")))
	behindTheProxy := newLocker(t, []redlock.Node{oddClient}, &redlock.Options{NoQuarantine: true})
	_ = behindTheProxy.Warm(ctx) // the odd node's answers are recorded first

	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NoQuarantine: true})
	_ = l.Warm(ctx) // may report that the honest nodes name the check script otherwise
	lease, err := l.Lock(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lease.Check(ctx), "the lease is held")
	drain(t, l)
	for i, m := range c.servers {
		assert.NotEmpty(t, lockKeys(m), "node %d still holds the lease's key after a Check", i)
	}
	other := newLocker(t, c.nodes(nil), &redlock.Options{NoQuarantine: true})
	_, err = other.TryLock(ctx, "k", time.Minute)
	assert.ErrorIs(t, err, redlock.ErrNotObtained, "a second Locker must not get a key whose lease is held and checked")
}

// A digest that names no script, answered by one node, stays that node's:
// the honest nodes, which named the right digest, get every release by it
// (EVALSHA, no EVAL). Were it the process's digest for every node, every
// release on them would meet NOSCRIPT and go again as EVAL (two round
// trips where a node's budget is one, and a NOSCRIPT that the node guard
// reads as a new server process), for the rest of the process.
func TestAWrongDigestFromOneNodeDoesNotPoisonTheOthers(t *testing.T) {
	if runAlonePerTransport(t) {
		return
	}
	h := releasesBesideAnOddNode(t, 1)
	assert.Equal(t, 3*oddCycles, h.get("evalsha"), "a release per cycle on each node, by digest")
	assert.Zero(t, h.get("eval"), "no release went again by its source: the honest nodes have the script")
}

// oddCycles is how many lock cycles releasesBesideAnOddNode runs.
const oddCycles = 10

// releasesBesideAnOddNode warms lockers Lockers, one after another, on a
// node that names the release script by a digest of no script (a proxy),
// then runs oddCycles lock cycles on three honest nodes with a Locker
// warmed there, and returns the honest nodes' command counts.
func releasesBesideAnOddNode(t *testing.T, lockers int) *commands {
	t.Helper()
	ctx := t.Context()
	odd := redistest.Miniredis(t)
	trust(odd)
	oddClient := newClient(t, odd.Addr())
	oddClient.AddHook(nameLoad(readScript(t, "release"), strings.Repeat("0123456789", 4)))
	for range lockers { // a Locker per tenant, each dropped after use
		behindTheProxy := newLocker(t, []redlock.Node{oddClient}, &redlock.Options{NoQuarantine: true})
		_ = behindTheProxy.Warm(ctx) // the odd node's answer is recorded first
	}
	h := &commands{}
	c := counted(t, 3, h)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NoQuarantine: true})
	require.NoError(t, l.Warm(ctx), "every honest node names the right digest")
	cycles(t, l, "k", oddCycles)
	return h
}

// The digest a script's shared wire form goes by is the one most of the
// Locker's own nodes named (fanOut), so Lockers made one after another on
// a deployment that names a script otherwise (here one node, a Locker per
// tenant) do not change how an honest Locker's nodes are sent it: by
// digest. Had the nodes of every Locker of the process voted, and kept
// their votes after their Locker was gone, they would outvote the honest
// nodes, and on the pipelined transport every command to an honest node
// would go by its source (EVAL, a form built per node per command).
func TestOtherLockersOddDigestsDoNotMakeHonestNodesGoByEVAL(t *testing.T) {
	if runAlonePerTransport(t) {
		return
	}
	h := releasesBesideAnOddNode(t, 4)
	assert.Equal(t, 3*oddCycles, h.get("evalsha"), "a release per cycle on each node, by the digest it named")
	assert.Zero(t, h.get("eval"), "no release went by its source: each honest node named its digest")
}

// A node that named the check script by the release script's digest (a
// rewriting proxy), and names it right once the proxy is gone, has named
// one source two ways: Warm says so, and the node is trusted with neither
// digest from then on (luascript.Names.Record): the check script goes to
// it as EVAL, so Check keeps the lease's key there, on both transports.
// Had it kept its first digest, the direct transport, which sends a script
// by the node's own digest, would run the release script there on every
// Check. The control: the honest nodes keep the key too.
func TestANodeThatNamedAScriptTwoWaysIsTrustedWithNeither(t *testing.T) {
	if runAlonePerTransport(t) {
		return
	}
	ctx := t.Context()
	c := newCluster(t, 3)
	fixed := new(atomic.Bool)
	proxy := rewriteLoad(readScript(t, "check"), readScript(t, "release"))
	proxy.off = fixed.Load // the proxy is taken away once fixed is set
	c.clients[0].AddHook(proxy)
	l := newLocker(t, c.nodes(nil), &redlock.Options{NoQuarantine: true})
	// Node 0 names the release script's digest for the check script, then
	// for the release script too: one digest for two sources.
	require.ErrorContains(t, l.Warm(ctx), "trusted with neither")

	fixed.Store(true) // the proxy is gone
	require.ErrorContains(t, l.Warm(ctx), "trusted with neither", "node 0 names the check script otherwise than before")
	lease, err := l.Lock(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lease.Check(ctx))
	drain(t, l)
	for i := 1; i < 3; i++ {
		require.NotEmpty(t, lockKeys(c.servers[i]), "the control: honest node %d keeps the lease's key", i)
	}
	assert.NotEmpty(t, lockKeys(c.servers[0]), "node 0 ran the release script for a Check, by the digest it named first")
}

// In FIPS-only mode, a synctest bubble starves crypto/rand: each of its
// generators is seeded from a CPU-jitter source timed with the time
// package, which stands still in a bubble, so the first draw on a fresh
// generator (after a GC emptied their pool) panics. A lock in a bubble
// draws its value there: without inVirtualTime's seeded stream the child
// crashes (the control), with it the lock is taken. Production code never
// runs in a bubble; a user's own virtual-time tests in this mode need the
// same seeded stream (docs/operations.md).
func TestVirtualTimeStarvesFIPSEntropy(t *testing.T) {
	const modeVar = "REDLOCK_TEST_BUBBLE_RANDOM"
	if os.Getenv(modeVar) == "" {
		for _, mode := range []string{"seeded", "plain"} {
			ran, out, err := redistest.RunAlone(t, "GODEBUG=fips140=only", modeVar+"="+mode)
			require.True(t, ran)
			if mode == "seeded" {
				require.NoError(t, err, out)
				continue
			}
			require.Error(t, err, "the control: in a bubble, FIPS-only crypto/rand must starve\n%s", out)
			assert.Contains(t, out, "failed to obtain initial entropy")
		}
		return
	}
	require.True(t, fips140.Enforced(), "the child runs in FIPS-only mode")
	lockInABubble := func(t *testing.T) {
		m, nodes, closeAll := newMemNet(3)
		l, _, finish := stallLocker(t, m, nodes, closeAll, false)
		defer finish()
		for range 4 {
			runtime.GC() // the generators' pool empties: the next draw seeds a new one
		}
		lease, err := l.TryLock(t.Context(), "k", time.Second)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(t.Context()))
	}
	if os.Getenv(modeVar) == "seeded" {
		inVirtualTime(t, lockInABubble)
	} else {
		synctest.Test(t, lockInABubble)
	}
}
