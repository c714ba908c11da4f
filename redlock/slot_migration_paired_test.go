package redlock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// slotHook makes a *redis.Client answer as a Redis Cluster master whose slot
// migrates, as Redis does (cluster.c getNodeByQuery, the importing side
// after ASKING): a script naming several keys of which the node lacks some
// gets TRYAGAIN. It looks at the keys in the server itself.
type slotHook struct {
	m         *miniredis.Miniredis
	migrating *atomic.Bool
	narrow    atomic.Int64 // single-key lock scripts seen while migrating
	heals     atomic.Int64 // single-key extends sent with heal "1" while migrating
}

func (h *slotHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slotHook) refuse(cmd redis.Cmder) bool {
	name := strings.ToLower(cmd.Name())
	if name != "evalsha" && name != "eval" || !h.migrating.Load() {
		return false
	}
	args := cmd.Args()
	n, _ := args[2].(int)
	if n < 1 {
		return false
	}
	k0, _ := args[3].(string)
	if strings.HasPrefix(k0, "redlock:memory") {
		return false
	}
	if n == 1 {
		h.narrow.Add(1)
		if len(args) >= 7 && args[6] == "1" {
			h.heals.Add(1)
		}
		return false
	}
	missing := 0
	for _, k := range args[3 : 3+n] {
		if !h.m.Exists(k.(string)) {
			missing++
		}
	}
	return missing > 0
}

func (h *slotHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.refuse(cmd) {
			cmd.SetErr(tryAgainError{})
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *slotHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var sent []redis.Cmder
		for _, c := range cmds {
			if h.refuse(c) {
				c.SetErr(tryAgainError{})
				continue
			}
			sent = append(sent, c)
		}
		if len(sent) == 0 {
			return nil
		}
		return next(ctx, sent)
	}
}

// Attack on 4bd8ef3 through the direct transport's paired path (a
// *redis.Client with NoAutoPipeline: the guard's companions ride with the
// command, sendPaired), with TRYAGAIN only where Redis gives it: a held
// lease is checked and extended, a node that lost the key is not healed,
// and a revoked lease is not set again, also after the node's script cache
// was flushed (NOSCRIPT, then EVAL of the single-key form).
func TestSlotMigrationOnThePairedPath(t *testing.T) {
	for _, flush := range []bool{false, true} {
		t.Run(map[bool]string{false: "scripts cached", true: "scripts flushed"}[flush], func(t *testing.T) {
			ctx := t.Context()
			c := newCluster(t, 3)
			var migrating atomic.Bool
			hooks := make([]*slotHook, 3)
			nodes := make([]redlock.Node, 3)
			for i, m := range c.servers {
				cl := newClient(t, m.Addr())
				hooks[i] = &slotHook{m: m, migrating: &migrating}
				cl.AddHook(hooks[i])
				nodes[i] = cl
			}
			l, err := redlock.New(nodes, &redlock.Options{NoAutoPipeline: true, NodeTimeout: 5 * time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Drain(context.Background()) })

			const key = "mig"
			lease, err := l.TryLock(ctx, key, time.Minute)
			require.NoError(t, err)
			value, err := c.servers[0].Get(key)
			require.NoError(t, err)

			migrating.Store(true)
			if flush {
				for _, m := range c.servers {
					require.NoError(t, newClient(t, m.Addr()).ScriptFlush(ctx).Err())
				}
			}
			require.NoError(t, lease.Check(ctx))
			require.NoError(t, lease.Extend(ctx, time.Minute))
			drain(t, l)
			for i, h := range hooks {
				require.Positive(t, h.narrow.Load(), "node %d: single-key form sent", i)
			}
			c.servers[0].Del(key)
			require.NoError(t, lease.Extend(ctx, time.Minute))
			drain(t, l)
			require.Equal(t, []int{1, 2}, c.holding(key, value), "no healing mid-migration")

			_, err = l.Revoke(context.Background(), key)
			t.Logf("revoke mid-migration: %v", err)
			migrating.Store(false)
			_, err = l.Revoke(ctx, key)
			require.NoError(t, err)
			migrating.Store(true)
			err = lease.Extend(ctx, time.Minute)
			require.ErrorIs(t, err, redlock.ErrNotHeld)
			drain(t, l)
			for i, m := range c.servers {
				require.False(t, m.Exists(key), "node %d: revoked key set again", i)
			}
			for i, h := range hooks {
				require.Zero(t, h.heals.Load(), "node %d: a single-key extension asked to heal", i)
			}
		})
	}
}
