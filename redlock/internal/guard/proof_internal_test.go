package guard

import (
	"context"
	"crypto/fips140"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
)

// sentScripts is a node that records how each script went (EVAL with its
// source as the last argument, or EVALSHA), refuses SCRIPT LOAD (the guard
// must not need it), and, with tamper set, replaces the digest an
// examination names with something that is not one.
type sentScripts struct {
	*redis.Client
	mu     sync.Mutex
	sent   []string // "eval" or "evalsha <digest>"
	tamper bool
}

func (s *sentScripts) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	s.mu.Lock()
	if last, _ := args[len(args)-1].(string); last == src {
		s.sent = append(s.sent, "eval")
	} else {
		s.sent = append(s.sent, "eval without its source")
	}
	s.mu.Unlock()
	cmd := s.Client.Eval(ctx, src, keys, args...)
	if res, err := cmd.Slice(); err == nil && s.tamper {
		res[len(res)-1] = "OK"
		cmd.SetVal(res)
	}
	return cmd
}

func (s *sentScripts) EvalSha(ctx context.Context, digest string, keys []string, args ...any) *redis.Cmd {
	s.mu.Lock()
	s.sent = append(s.sent, "evalsha "+digest)
	s.mu.Unlock()
	return s.Client.EvalSha(ctx, digest, keys, args...)
}

func (s *sentScripts) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx)
	cmd.SetErr(redistest.ServerError("NOPERM the guard must not need SCRIPT LOAD"))
	return cmd
}

func (s *sentScripts) took() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.sent = nil }()
	return s.sent
}

// sha1Hex is the SHA-1 of src as Redis computes it, computed here inside
// the bypass (the test checks the server's answer; the guard never
// computes one).
func sha1Hex(src string) (digest string) {
	fips140.WithoutEnforcement(func() {
		sum := sha1.Sum([]byte(src))
		digest = hex.EncodeToString(sum[:])
	})
	return digest
}

// An examination's copy learns its digest from the run that examined: the
// EVAL carries the copy's source, the reply names its SHA-1, and the copy
// is adopted with it, cached on the server, with no SCRIPT LOAD. The next
// examination goes by that digest (EVALSHA, without the source). A new
// process's cache (SCRIPT FLUSH) answers NOSCRIPT and a new copy, with a
// digest of its own, examines. The control: a reply whose digest is not
// one adopts nothing.
func TestExaminationNamesItsDigestInTheSameRun(t *testing.T) {
	ctx := t.Context()
	m := redistest.Miniredis(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	node := &sentScripts{Client: client}
	exists := func(digest string) bool {
		found, err := client.ScriptExists(ctx, digest).Result()
		require.NoError(t, err)
		return found[0]
	}
	var e examinations
	examine := func() (*examination, error) {
		res, x, err := e.run(ctx, node, markerKey, markerExpiry(), int64(10_000), 0, MaxTTLLimit.Milliseconds())
		if err == nil {
			_, _, _, _, _, err = parseExamined(res)
		}
		return x, err
	}

	first, err := examine()
	require.NoError(t, err)
	assert.Equal(t, []string{"eval"}, node.took(), "one EVAL, carrying the copy's source")
	assert.Equal(t, sha1Hex(first.src), first.digest, "the digest is the copy's SHA-1, as the server named it")
	assert.True(t, exists(first.digest), "cached where it examined")
	assert.Equal(t, []any{"script", "exists", first.digest}, first.existsArgs)

	again, err := examine()
	require.NoError(t, err)
	assert.Same(t, first, again)
	assert.Equal(t, []string{"evalsha " + first.digest}, node.took(), "by its digest, without its source")

	require.NoError(t, client.ScriptFlush(ctx).Err()) // as a new process's cache
	fresh, err := examine()
	require.NoError(t, err)
	assert.Equal(t, []string{"evalsha " + first.digest, "eval"}, node.took(), "NOSCRIPT, then a new copy")
	assert.NotEqual(t, first.digest, fresh.digest)
	assert.True(t, exists(fresh.digest))
	assert.False(t, exists(first.digest))

	// The control: a digest that is not one is never adopted.
	require.NoError(t, client.ScriptFlush(ctx).Err())
	node.tamper = true
	_, err = examine()
	require.ErrorContains(t, err, `named its digest "OK", which is not one`)
	e.mu.Lock()
	defer e.mu.Unlock()
	assert.Same(t, fresh, e.adopted[""], "the failed copy is not adopted")
	assert.Equal(t, 1, e.failures)
	assert.True(t, strings.HasPrefix(e.lastErr.Error(), "redlock: the guard's examine script named"))
}
