package luascript

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
)

const src = `return redis.call("INCR", KEYS[1])`

// counting is a node that counts the script commands sent through it, and
// refuses SCRIPT LOAD as an ACL would where refuse is set.
type counting struct {
	*redis.Client
	refuse                 bool
	evals, evalshas, loads atomic.Int64
}

func (c *counting) Eval(ctx context.Context, s string, keys []string, args ...any) *redis.Cmd {
	c.evals.Add(1)
	return c.Client.Eval(ctx, s, keys, args...)
}

func (c *counting) EvalSha(ctx context.Context, d string, keys []string, args ...any) *redis.Cmd {
	c.evalshas.Add(1)
	return c.Client.EvalSha(ctx, d, keys, args...)
}

func (c *counting) ScriptLoad(ctx context.Context, s string) *redis.StringCmd {
	c.loads.Add(1)
	if c.refuse {
		cmd := redis.NewStringCmd(ctx)
		cmd.SetErr(redistest.ServerError("NOPERM User u has no permissions to run the 'script|load' command"))
		return cmd
	}
	return c.Client.ScriptLoad(ctx, s)
}

func node(t *testing.T) *counting {
	m := redistest.Miniredis(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	return &counting{Client: c}
}

func TestValidDigestIsFortyLowerCaseHexDigits(t *testing.T) {
	for d, want := range map[string]bool{
		"e0e1f9fabfc9d4800c877a703b823ac0578ff8db":  true,
		"E0E1F9FABFC9D4800C877A703B823AC0578FF8DB":  false, // not as Redis answers
		"e0e1f9fabfc9d4800c877a703b823ac0578ff8d":   false,
		"e0e1f9fabfc9d4800c877a703b823ac0578ff8dbb": false,
		"g0e1f9fabfc9d4800c877a703b823ac0578ff8db":  false,
		"": false,
	} {
		assert.Equal(t, want, ValidDigest(d), "%q", d)
	}
}

// A node's digest is recorded once; the same node naming the script
// otherwise is trusted with neither from then on (the script goes to it
// as EVAL), and is not asked again. Something that is not a digest is
// never recorded.
func TestANodeThatNamesAScriptTwoWaysIsTrustedWithNeither(t *testing.T) {
	s := New(src)
	var n Names
	require.Error(t, n.Record(s, "OK"))
	assert.Empty(t, n.Of(s), "not a digest: nothing recorded")
	first, other := "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0000000000000000000000000000000000000000"
	require.NoError(t, n.Record(s, first))
	require.NoError(t, n.Record(s, first), "the same digest again agrees")
	assert.Equal(t, first, n.Of(s))
	require.ErrorContains(t, n.Record(s, other), "trusted with neither")
	assert.Empty(t, n.Of(s), "neither digest")
	require.Error(t, n.Record(s, first), "nor the first again")
	assert.Empty(t, n.Of(s))
	c := node(t)
	n.LearnSoon(t.Context(), c, s, time.Second)
	require.NoError(t, n.Run(t.Context(), c, s, []string{"k"}).Err())
	assert.Equal(t, [3]int64{0, 1, 0}, [3]int64{c.loads.Load(), c.evals.Load(), c.evalshas.Load()}, "as EVAL, and not learned again")
}

// A digest one node named is that node's alone: another node gets the
// script as EVAL until it names the digest itself, whatever the first
// named (here a digest of no script, as a proxy that rewrites scripts
// might answer), and no digest is trusted for every node.
func TestADigestIsTrustedOnlyByTheNodeThatNamedIt(t *testing.T) {
	s := New(src)
	var odd, honest Names
	wrong, right := "0000000000000000000000000000000000000000", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
	require.NoError(t, odd.Record(s, wrong))
	assert.Equal(t, wrong, odd.Of(s))
	assert.Empty(t, honest.Of(s), "a node that named nothing goes by no digest")
	require.NoError(t, honest.Record(s, right), "each node names its own")
	assert.Equal(t, right, honest.Of(s))
	assert.Empty(t, s.Digest(), "nothing is trusted for every node")
}

// A trusted digest (a test's own server) serves every node that named
// none; a node's own stays its own; a second trusted digest is refused.
func TestATrustedDigestServesEveryNodeThatNamedNone(t *testing.T) {
	s := New(src)
	var n, own Names
	trusted, other := "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0000000000000000000000000000000000000000"
	require.NoError(t, own.Record(s, other))
	require.Error(t, s.Trust("OK"))
	require.NoError(t, s.Trust(trusted))
	require.NoError(t, s.Trust(trusted))
	require.Error(t, s.Trust(other))
	assert.Equal(t, trusted, n.Of(s))
	assert.Equal(t, other, own.Of(s))
	assert.Equal(t, trusted, s.Digest())
}

// Until the node named the script, Run sends its source (EVAL); once
// learned, its digest (EVALSHA); a node that lost it (SCRIPT FLUSH)
// answers NOSCRIPT, and the source follows.
func TestRunSendsTheSourceUntilTheNodeNamedTheDigest(t *testing.T) {
	c := node(t)
	ctx := t.Context()
	s := New(src)
	var n Names
	require.NoError(t, n.Run(ctx, c, s, []string{"k"}).Err())
	assert.Equal(t, [2]int64{1, 0}, [2]int64{c.evals.Load(), c.evalshas.Load()}, "EVAL while unknown")

	require.NoError(t, n.Learn(ctx, c, s))
	want, err := c.Client.ScriptLoad(ctx, src).Result()
	require.NoError(t, err)
	assert.Equal(t, want, n.Of(s), "the server's name for it")
	require.NoError(t, n.Run(ctx, c, s, []string{"k"}).Err())
	assert.Equal(t, [2]int64{1, 1}, [2]int64{c.evals.Load(), c.evalshas.Load()}, "EVALSHA once learned")

	require.NoError(t, c.ScriptFlush(ctx).Err())
	v, err := n.Run(ctx, c, s, []string{"k"}).Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 3, v)
	assert.Equal(t, [2]int64{2, 2}, [2]int64{c.evals.Load(), c.evalshas.Load()}, "NOSCRIPT, then EVAL")
}

// Many uses while the digest is unknown start one SCRIPT LOAD, in the
// background; the control is a second script, which nothing learned.
func TestLearnSoonLoadsOnceForManyUses(t *testing.T) {
	c := node(t)
	s, control := New(src), New(src+" ")
	var n Names
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { n.LearnSoon(t.Context(), c, s, time.Second) })
	}
	wg.Wait()
	require.Eventually(t, func() bool { return n.Of(s) != "" }, 5*time.Second, time.Millisecond)
	n.LearnSoon(t.Context(), c, s, time.Second) // known: nothing more
	assert.EqualValues(t, 1, c.loads.Load())
	assert.Empty(t, n.Of(control))
}

// Use answers "" (EVAL) while the node named no digest, and learns one
// meanwhile; then the node's digest, with no SCRIPT LOAD more.
func TestUseLearnsWhileTheNodeNamedNone(t *testing.T) {
	c := node(t)
	s := New(src)
	var n Names
	assert.Empty(t, n.Use(t.Context(), c, s, time.Second))
	require.Eventually(t, func() bool { return n.Of(s) != "" }, 5*time.Second, time.Millisecond)
	assert.Equal(t, n.Of(s), n.Use(t.Context(), c, s, time.Second))
	assert.EqualValues(t, 1, c.loads.Load())
}

// A node whose ACL refuses SCRIPT LOAD is asked once, then not again
// before the backoff: the script goes as EVAL meanwhile, at no extra
// command per use.
func TestLearnSoonBacksOffAfterARefusal(t *testing.T) {
	c := node(t)
	c.refuse = true
	s := New(src)
	var n Names
	n.LearnSoon(t.Context(), c, s, time.Second)
	e := n.entry(s)
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return !e.learning && e.failures == 1
	}, 5*time.Second, time.Millisecond)
	for range 50 {
		n.LearnSoon(t.Context(), c, s, time.Second)
		require.NoError(t, n.Run(t.Context(), c, s, []string{"k"}).Err())
	}
	assert.EqualValues(t, 1, c.loads.Load(), "one SCRIPT LOAD, not one per use")
	assert.EqualValues(t, 50, c.evals.Load())
	assert.Empty(t, n.Of(s))

	// The control: once the backoff has passed, it asks again.
	c.refuse = false
	e.mu.Lock()
	e.retryAt = time.Now()
	e.mu.Unlock()
	n.LearnSoon(t.Context(), c, s, time.Second)
	require.Eventually(t, func() bool { return n.Of(s) != "" }, 5*time.Second, time.Millisecond)
	assert.EqualValues(t, 2, c.loads.Load())
}

func TestLearnBackoffDoublesFromASecondToTenMinutes(t *testing.T) {
	for failures, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 10: 512 * time.Second, 11: 10 * time.Minute, 100: 10 * time.Minute} {
		assert.Equal(t, want, learnBackoff(failures), "after %d failures", failures)
	}
}

// A node that names two different scripts by one digest (a proxy that
// loads one script in place of another) has named at least one of them
// otherwise than its source: sent either by that digest (EVALSHA), it may
// run the other (a check that runs the release, deleting the lease's key).
// It is trusted with neither, as a node that named one script two ways
// is: both go to it as EVAL, whose source it runs as sent.
func TestANodeThatNamesTwoScriptsOneDigestIsTrustedWithNeither(t *testing.T) {
	check, release := New(`return redis.call("GET", KEYS[1])`), New(`return redis.call("DEL", KEYS[1])`)
	const d = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
	var n Names
	require.NoError(t, n.Record(release, d))
	_ = n.Record(check, d) // the proxy loaded the release script for the check script
	assert.Empty(t, n.Of(check), "the check script would run, by EVALSHA, whatever the node cached under the release script's digest")
	assert.Empty(t, n.Of(release), "one of the two namings is false, and the node cannot say which")
}
