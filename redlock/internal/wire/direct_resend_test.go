package wire

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
)

type pipeRecorder struct {
	mu    sync.Mutex
	pipes [][][]any
}

func (h *pipeRecorder) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipeRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipeRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch strings.ToLower(cmds[0].Name()) {
		case "hello", "client", "auth", "select":
			return next(ctx, cmds)
		}
		var p [][]any
		for _, c := range cmds {
			p = append(p, append([]any(nil), c.Args()...))
		}
		h.mu.Lock()
		h.pipes = append(h.pipes, p)
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// Every trip of sendPaired (TRYAGAIN -> single-key EVALSHA -> NOSCRIPT ->
// EVAL) carries a WAIT, and each script command's numkeys matches its keys.
func TestEveryResendCarriesItsWait(t *testing.T) {
	m := redistest.Miniredis(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	var migrating atomic.Bool
	migrating.Store(true)
	rec := &pipeRecorder{}
	client.AddHook(rec)
	client.AddHook(&redistest.MigratingSlot{Server: m, Migrating: &migrating, AnswerWait: true})
	require.NoError(t, m.Set("k", "v"))
	s := loadScript("extend", "GET, PEXPIRE, SET")
	s.SingleKey = func(c Command) Command { c.Keys = c.Keys[:1]; return c }
	d := NewDirect[struct{}](client, NewWait(1, false, time.Second), nil, nil)
	c := ScriptCommand(s, []string{"k", "{k}:tombstone"}, "v", 60000, "0", 1).Bind().Replicated() // value, ms, heal, keys
	got := make(replies, 1)
	d.Submit(t.Context(), c, Send{Timeout: 5 * time.Second}, got, 0)
	r := <-got
	require.NoError(t, r.Cmd.Err())
	require.NoError(t, r.NotReplicated)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.GreaterOrEqual(t, len(rec.pipes), 2)
	for i, p := range rec.pipes {
		t.Logf("trip %d: %v", i, p)
		last := p[len(p)-1]
		require.Equal(t, "wait", strings.ToLower(fmt.Sprint(last[0])), "trip %d has its WAIT", i)
		sc := p[0]
		n := sc[2].(int)
		require.Len(t, sc, 3+n+4, "trip %d: numkeys %d matches keys and argv (value, ms, heal, keys)", i, n)
	}
}
