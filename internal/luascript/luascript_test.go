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

// A digest is recorded once; a node that names the script otherwise is
// refused, and the first digest stays. Something that is not a digest is
// never recorded.
func TestRecordKeepsTheFirstDigestAndRefusesAnother(t *testing.T) {
	s := New(src)
	require.Error(t, s.Record("OK"))
	assert.Empty(t, s.Digest(), "not a digest: nothing recorded")
	first, other := "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0000000000000000000000000000000000000000"
	require.NoError(t, s.Record(first))
	require.NoError(t, s.Record(first), "the same digest again agrees")
	require.ErrorContains(t, s.Record(other), "another node")
	assert.Equal(t, first, s.Digest())
}

// Until a server named the script, Run sends its source (EVAL); once
// learned, its digest (EVALSHA); a server that lost it (SCRIPT FLUSH)
// answers NOSCRIPT, and the source follows.
func TestRunSendsTheSourceUntilTheDigestIsLearned(t *testing.T) {
	n := node(t)
	ctx := t.Context()
	s := New(src)
	require.NoError(t, s.Run(ctx, n, []string{"k"}).Err())
	assert.Equal(t, [2]int64{1, 0}, [2]int64{n.evals.Load(), n.evalshas.Load()}, "EVAL while unknown")

	require.NoError(t, s.Learn(ctx, n))
	want, err := n.Client.ScriptLoad(ctx, src).Result()
	require.NoError(t, err)
	assert.Equal(t, want, s.Digest(), "the server's name for it")
	require.NoError(t, s.Run(ctx, n, []string{"k"}).Err())
	assert.Equal(t, [2]int64{1, 1}, [2]int64{n.evals.Load(), n.evalshas.Load()}, "EVALSHA once learned")

	require.NoError(t, n.ScriptFlush(ctx).Err())
	v, err := s.Run(ctx, n, []string{"k"}).Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 3, v)
	assert.Equal(t, [2]int64{2, 2}, [2]int64{n.evals.Load(), n.evalshas.Load()}, "NOSCRIPT, then EVAL")
}

// Many uses while the digest is unknown start one SCRIPT LOAD, in the
// background; the control is a second script, which nothing learned.
func TestLearnSoonLoadsOnceForManyUses(t *testing.T) {
	n := node(t)
	s, control := New(src), New(src+" ")
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { s.LearnSoon(t.Context(), n, time.Second) })
	}
	wg.Wait()
	require.Eventually(t, func() bool { return s.Digest() != "" }, 5*time.Second, time.Millisecond)
	s.LearnSoon(t.Context(), n, time.Second) // known: nothing more
	assert.EqualValues(t, 1, n.loads.Load())
	assert.Empty(t, control.Digest())
}

// A node whose ACL refuses SCRIPT LOAD is asked once, then not again
// before the backoff: the script goes as EVAL meanwhile, at no extra
// command per use.
func TestLearnSoonBacksOffAfterARefusal(t *testing.T) {
	n := node(t)
	n.refuse = true
	s := New(src)
	s.LearnSoon(t.Context(), n, time.Second)
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.learning && s.failures == 1
	}, 5*time.Second, time.Millisecond)
	for range 50 {
		s.LearnSoon(t.Context(), n, time.Second)
		require.NoError(t, s.Run(t.Context(), n, []string{"k"}).Err())
	}
	assert.EqualValues(t, 1, n.loads.Load(), "one SCRIPT LOAD, not one per use")
	assert.EqualValues(t, 50, n.evals.Load())
	assert.Empty(t, s.Digest())

	// The control: once the backoff has passed, it asks again.
	n.refuse = false
	s.mu.Lock()
	s.retryAt = time.Now()
	s.mu.Unlock()
	s.LearnSoon(t.Context(), n, time.Second)
	require.Eventually(t, func() bool { return s.Digest() != "" }, 5*time.Second, time.Millisecond)
	assert.EqualValues(t, 2, n.loads.Load())
}

func TestLearnBackoffDoublesFromASecondToTenMinutes(t *testing.T) {
	for failures, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 10: 512 * time.Second, 11: 10 * time.Minute, 100: 10 * time.Minute} {
		assert.Equal(t, want, learnBackoff(failures), "after %d failures", failures)
	}
}
