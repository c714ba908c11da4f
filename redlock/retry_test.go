package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// takenNode is an in-memory Node on which the key is always held by someone
// else: every SET is contention, every script finds nothing of ours. It has
// no network, so it runs inside a synctest bubble.
type takenNode struct {
	mu   sync.Mutex
	sets []time.Time
}

func (n *takenNode) Do(ctx context.Context, args ...any) *redis.Cmd {
	if guardCompanion(args) { // not recorded; its answer keeps the guard from deciding, and a refusal stays a refusal
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetVal("someone-else")
		return cmd
	}
	n.mu.Lock()
	n.sets = append(n.sets, time.Now())
	n.mu.Unlock()
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetVal("someone-else")
	return cmd
}

func (n *takenNode) script(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetVal(int64(-1))
	return cmd
}

func (n *takenNode) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return n.script(ctx)
}
func (n *takenNode) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return n.script(ctx)
}
func (n *takenNode) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return n.script(ctx)
}
func (n *takenNode) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return n.script(ctx)
}
func (n *takenNode) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceCmd(ctx)
}
func (n *takenNode) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	return redis.NewStringCmd(ctx)
}

// Behaviour 6: Lock waits a random delay in [RetryDelay, RetryDelay+RetryJitter)
// between attempts, never spins, and stops when the context ends. Fake time
// (synctest) makes the gaps exact.
func TestLockRetryDelaysAreJittered(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		nodes := []*takenNode{{}, {}, {}}
		l, err := redlock.New([]redlock.Node{nodes[0], nodes[1], nodes[2]}, &redlock.Options{
			RetryDelay:  10 * time.Millisecond,
			RetryJitter: 5 * time.Millisecond,
		})
		require.NoError(t, err)

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		_, err = l.Lock(ctx, "k", time.Minute)
		assert.Equal(t, time.Second, time.Since(start), "Lock must stop when the context ends")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, redlock.ErrNotObtained)

		sets := nodes[0].sets
		require.Greater(t, len(sets), 60, "about 1s/12.5ms attempts")
		require.Less(t, len(sets), 101, "an attempt every 10ms at most")
		gaps := map[time.Duration]bool{}
		for i := 1; i < len(sets); i++ {
			gap := sets[i].Sub(sets[i-1])
			assert.GreaterOrEqual(t, gap, 10*time.Millisecond)
			assert.Less(t, gap, 15*time.Millisecond)
			gaps[gap] = true
		}
		assert.Greater(t, len(gaps), 10, "delays must be random, not fixed")
		require.NoError(t, l.Drain(t.Context()))
	})
}

// A context that ends during the retry wait is reported even if the last
// attempt failed for another reason.
func TestLockGivesUpWithBothCauses(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		l, err := redlock.New([]redlock.Node{&takenNode{}}, &redlock.Options{RetryDelay: time.Hour})
		require.NoError(t, err)
		ctx, cancel := context.WithCancelCause(t.Context())
		shutdown := errors.New("shutting down")
		time.AfterFunc(time.Minute, func() { cancel(shutdown) })
		_, err = l.Lock(ctx, "k", time.Minute)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, shutdown)
		assert.ErrorIs(t, err, redlock.ErrNotObtained)
		assert.Contains(t, err.Error(), "gave up after 1 attempts")
	})
}

// TestHugeRetryDelayWaitsInsteadOfSpinning: a RetryDelay meant as "rely on
// wake-ups" (math.MaxInt64), with any jitter, makes Lock wait for the key's
// release (or its context) after its first attempts, never spin: the sum of
// delay and jitter saturates instead of wrapping to a negative wait.
// Control: a short RetryDelay polls many times in the same window.
func TestHugeRetryDelayWaitsInsteadOfSpinning(t *testing.T) {
	c := newCluster(t, 3)
	c.setOther(t, "busy", 0, 1, 2)
	count := func(t *testing.T, opts redlock.Options) int {
		t.Helper()
		var tries attempts
		opts.Observer = &tries
		opts.NoWakeUps = true
		l := newLocker(t, c.nodes(nil), &opts)
		ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
		defer cancel()
		_, err := l.Lock(ctx, "busy", time.Second)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		drain(t, l)
		return tries.count()
	}
	for _, jitter := range []time.Duration{0, time.Millisecond, math.MaxInt64} {
		t.Run(fmt.Sprint("jitter ", jitter), func(t *testing.T) {
			n := count(t, redlock.Options{RetryDelay: math.MaxInt64, RetryJitter: jitter})
			assert.LessOrEqual(t, n, 2, "attempts in 400ms with RetryDelay math.MaxInt64")
		})
	}
	t.Run("control: a short delay polls", func(t *testing.T) {
		assert.Greater(t, count(t, redlock.Options{RetryDelay: time.Millisecond, RetryJitter: time.Millisecond}), 2, "attempts in 400ms with a RetryDelay of 1ms")
	})
}
