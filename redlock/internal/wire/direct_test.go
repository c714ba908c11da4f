package wire

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
)

// replies is a Receiver that hands each reply over.
type replies chan Reply

func (r replies) Receive(_ int, rep Reply) { r <- rep }

// The direct transport (every Redis Cluster node's) sends a script's
// single-key form where a migrating slot refused it with TRYAGAIN, in the
// same call, on both of its paths (a call alone, and one paired with its
// WAIT); a script without one keeps the refusal (the control).
func TestDirectSendsTheSingleKeyFormOnTryAgain(t *testing.T) {
	m := redistest.Miniredis(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	var migrating atomic.Bool
	migrating.Store(true)
	client.AddHook(&redistest.MigratingSlot{Server: m, Migrating: &migrating, AnswerWait: true})
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
			d := NewDirect[struct{}](client, NewWait(1, false, time.Second), nil, nil)
			c := ScriptCommand(tc.script, []string{"k", "{k}:tombstone"}, "v", 60000, "0", 1).Bind() // value, ms, heal, keys
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
