package redistest

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TryAgain is the error a Redis Cluster master gives a command naming
// several keys of a migrating slot when it holds only some of them.
var TryAgain = ServerError("TRYAGAIN Multiple keys request during rehashing of slot")

// MigratingSlot is a go-redis hook that makes a client of a miniredis
// server answer as a Redis Cluster master whose slot migrates (miniredis has
// no cluster), while Migrating is set: a script naming several keys of
// which Server lacks some gets TryAgain, as Redis gives it (cluster.c,
// getNodeByQuery). The node guard's examination (keys redlock:memory...)
// passes. With AnswerWait it answers WAIT itself (1 replica), which
// miniredis lacks. It counts the single-key lock scripts it saw while
// migrating, and those among them that asked to heal (an extension whose
// third argument is "1").
type MigratingSlot struct {
	Server     *miniredis.Miniredis
	Migrating  *atomic.Bool
	AnswerWait bool

	SingleKey atomic.Int64
	Heals     atomic.Int64
}

func (h *MigratingSlot) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *MigratingSlot) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.refuses(cmd) {
			cmd.SetErr(TryAgain)
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *MigratingSlot) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var sent []redis.Cmder
		for _, c := range cmds {
			switch {
			case h.refuses(c):
				c.SetErr(TryAgain)
			case h.AnswerWait && c.Name() == "wait":
				c.(*redis.Cmd).SetVal(int64(1))
			default:
				sent = append(sent, c)
			}
		}
		if len(sent) == 0 {
			return nil
		}
		return next(ctx, sent)
	}
}

// refuses reports whether cmd is a script that a migrating slot refuses,
// counting the single-key ones.
func (h *MigratingSlot) refuses(cmd redis.Cmder) bool {
	name := strings.ToLower(cmd.Name())
	if name != "evalsha" && name != "eval" || !h.Migrating.Load() {
		return false
	}
	args := cmd.Args()
	n, _ := args[2].(int)
	if n < 1 {
		return false
	}
	if k, _ := args[3].(string); strings.HasPrefix(k, "redlock:memory") {
		return false
	}
	if n == 1 {
		h.SingleKey.Add(1)
		if len(args) >= 7 && args[6] == "1" {
			h.Heals.Add(1)
		}
		return false
	}
	for _, k := range args[3 : 3+n] {
		if !h.Server.Exists(k.(string)) {
			return true
		}
	}
	return false
}
