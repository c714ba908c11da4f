package fence_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/fence"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock"
)

// errReplyLost is what a client sees when the server applied its command
// and the reply never came back: a timeout, indistinguishable from a
// command that never arrived.
var errReplyLost = errors.New("i/o timeout (the command was applied; its reply was lost)")

// loseReplies is a go-redis hook that, for a seeded share of EVALSHA and
// EVAL calls (the resource's writes and reads), lets the command run on the
// server and then reports errReplyLost in place of its reply.
type loseReplies struct {
	mu   sync.Mutex
	rng  *rand.Rand
	odds float64
	lost int
}

func (h *loseReplies) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *loseReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *loseReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.rng.Float64() >= h.odds {
			return nil
		}
		h.lost++
		cmd.SetErr(errReplyLost)
		return errReplyLost
	}
}

// chargeOnce applies a charge under a request id: the id is recorded in the
// same script as the charge, so a redelivered request finds it and changes
// nothing. This is the application's idempotency; the lock cannot give it.
// (NewScriptServerSHA: its digest comes from the server, so that the test
// runs under GODEBUG=fips140=only too.)
var chargeOnce = redis.NewScriptServerSHA(`
if redis.call("SET", KEYS[2], "1", "NX") then
  return redis.call("INCRBY", KEYS[1], ARGV[1])
end
return false`)

// Model 10 of docs/failure-models.md: a lock does not make work happen
// once. A worker takes a fenced lease, charges an account and acknowledges
// the message; when the resource's reply is lost (the charge landed, the
// worker saw a timeout), the message is delivered again and a worker charges
// again under a new lease with a newer token, which fencing accepts: every
// lease was valid and every write in order. Counted over 200 messages with
// a seeded 20% of replies lost: the fenced read-modify-write charges twice
// once per lost reply (the control must see duplicates), while a request id
// recorded with the charge charges each message exactly once.
func TestLocksDoNotReplaceIdempotency(t *testing.T) {
	const messages, amount = 200, 10
	var nodes []redlock.Node
	for range 3 {
		m := redistest.Miniredis(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		nodes = append(nodes, c)
	}
	locker, err := redlock.New(nodes, &redlock.Options{Fencing: true, NoQuarantine: true})
	require.NoError(t, err)

	run := func(t *testing.T, charge func(ctx context.Context, resource *redis.Client, lease *redlock.Lease, msg string) error) (balance int, lost int) {
		res := redistest.Miniredis(t)
		hook := &loseReplies{rng: rand.New(rand.NewPCG(20261202, 10)), odds: 0.2}
		resource := redis.NewClient(&redis.Options{Addr: res.Addr(), MaxRetries: -1})
		resource.AddHook(hook)
		t.Cleanup(func() { resource.Close() })
		ctx := t.Context()
		for i := range messages {
			msg := "msg-" + strconv.Itoa(i)
			for delivery := 1; ; delivery++ { // at-least-once: redelivered until acknowledged
				require.Less(t, delivery, 20, "message %s never acknowledged", msg)
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				lease, err := locker.Lock(lctx, "account:42", 10*time.Second)
				cancel()
				require.NoError(t, err)
				err = charge(ctx, resource, lease, msg)
				require.NoError(t, lease.Unlock(ctx))
				if err == nil {
					break // acknowledged
				}
				require.ErrorIs(t, err, errReplyLost)
			}
		}
		hook.mu.Lock()
		defer hook.mu.Unlock()
		v, err := res.Get("balance")
		require.NoError(t, err)
		balance, err = strconv.Atoi(v)
		require.NoError(t, err)
		return balance, hook.lost
	}

	t.Run("fenced read-modify-write: charges twice per lost reply", func(t *testing.T) {
		guard := (*fence.Redis)(nil)
		balance, lost := run(t, func(ctx context.Context, resource *redis.Client, lease *redlock.Lease, msg string) error {
			if guard == nil {
				guard = fence.NewRedis(resource)
			}
			v, _, err := guard.Get(ctx, "balance", lease.Token())
			if err != nil {
				return err
			}
			n, _ := strconv.Atoi(v)
			return guard.Set(ctx, "balance", strconv.Itoa(n+amount), lease.Token())
		})
		charged := balance / amount
		t.Logf("%d messages, %d replies lost: %d charges, %d of them duplicates", messages, lost, charged, charged-messages)
		assert.Positive(t, lost, "no reply was lost: the control shows nothing")
		assert.Greater(t, charged, messages, "the control: a lost reply after a landed write charges again")
	})

	t.Run("request id recorded with the charge: exactly once", func(t *testing.T) {
		balance, lost := run(t, func(ctx context.Context, resource *redis.Client, lease *redlock.Lease, msg string) error {
			err := chargeOnce.Run(ctx, resource, []string{"balance", "charged:" + msg}, amount).Err()
			if errors.Is(err, redis.Nil) {
				return nil // charged before: a redelivery, acknowledged without a charge
			}
			return err
		})
		t.Logf("%d messages, %d replies lost: %d charges", messages, lost, balance/amount)
		assert.Positive(t, lost)
		assert.Equal(t, messages*amount, balance, "each message charged once")
	})
}
