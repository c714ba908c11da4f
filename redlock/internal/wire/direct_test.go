package wire

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// tryAgainError is a Redis Cluster node's refusal of a command naming
// several keys of a migrating slot, of which it holds only some.
type tryAgainError struct{}

func (tryAgainError) Error() string {
	return "TRYAGAIN Multiple keys request during rehashing of slot"
}
func (tryAgainError) RedisError() {}

// migratingSlot is a go-redis hook that makes a node answer as a node whose
// slot migrates: every script naming more than one key gets TRYAGAIN
// (miniredis has no cluster). It answers WAIT itself, which miniredis lacks.
type migratingSlot struct{}

func (migratingSlot) DialHook(next redis.DialHook) redis.DialHook { return next }

func (migratingSlot) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if refused(cmd) {
			cmd.SetErr(tryAgainError{})
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (migratingSlot) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var sent []redis.Cmder
		for _, c := range cmds {
			switch {
			case refused(c):
				c.SetErr(tryAgainError{})
			case c.Name() == "wait":
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

// refused reports whether cmd is a script naming more than one key.
func refused(cmd redis.Cmder) bool {
	name := strings.ToLower(cmd.Name())
	if name != "evalsha" && name != "eval" {
		return false
	}
	n, _ := cmd.Args()[2].(int)
	return n > 1
}

// replies is a Receiver that hands each reply over.
type replies chan Reply

func (r replies) Receive(_ int, rep Reply) { r <- rep }

// The direct transport (every Redis Cluster node's) sends a script's
// single-key form where a migrating slot refused it with TRYAGAIN, in the
// same call, on both of its paths (a call alone, and one paired with its
// WAIT); a script without one keeps the refusal (the control).
func TestDirectSendsTheSingleKeyFormOnTryAgain(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	client.AddHook(migratingSlot{})
	require.NoError(t, m.Set("k", "v"))

	withForm := loadScript("extend", "GET, PEXPIRE, SET")
	var narrowed []Command
	withForm.SingleKey = func(c Command) Command {
		narrowed = append(narrowed, c)
		c.Keys = c.Keys[:1]
		return c
	}
	without := loadScript("extend", "GET, PEXPIRE, SET")
	for _, tc := range []struct {
		name      string
		script    *Script
		replicate bool
		want      int64 // the reply; 0: TRYAGAIN, the refusal
	}{
		{"alone", withForm, false, 1},
		{"paired with its WAIT", withForm, true, 1},
		{"alone, no single-key form", without, false, 0},
		{"paired, no single-key form", without, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			narrowed = nil
			d := NewDirect[struct{}](client, NewWait(1, false, time.Second), nil)
			c := ScriptCommand(tc.script, []string{"k", "{k}:tombstone"}, "v", 60000, "0").Bind()
			if tc.replicate {
				c = c.Replicated()
			}
			got := make(replies, 1)
			d.Submit(t.Context(), c, Send{Timeout: 5 * time.Second}, got, 0)
			r := <-got
			if tc.want == 0 {
				require.ErrorContains(t, r.Cmd.Err(), "TRYAGAIN")
				require.Empty(t, narrowed)
				return
			}
			require.NoError(t, r.Cmd.Err())
			n, err := r.Cmd.Int64()
			require.NoError(t, err)
			require.Equal(t, tc.want, n, "the extension's reply")
			require.Len(t, narrowed, 1, "the single-key form was asked for once")
			if tc.replicate {
				require.NoError(t, r.NotReplicated, "the single-key form's WAIT judged it")
			}
		})
	}
}
