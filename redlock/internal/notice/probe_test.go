package notice_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redisproc"
	"github.com/redlock/redlock/redlock/internal/notice"
)

func redis7(t *testing.T) *redisproc.Server {
	s, err := redisproc.Start(t.Context(), "redis-server")
	if err != nil {
		t.Skipf("no redis-server: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// serverError is a server's error reply (what go-redis returns for
// -LOADING, -BUSY, -MOVED, -TRYAGAIN, -MASTERDOWN ...).
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// failFirstDo answers the first Do (the conn's SPUBLISH probe) with a
// transient server error, as a node that is loading, busy with a script,
// or mid-migration answers.
type failFirstDo struct {
	*redis.Client
	failed bool
}

func (c *failFirstDo) Do(ctx context.Context, args ...any) *redis.Cmd {
	if !c.failed {
		c.failed = true
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetErr(serverError("LOADING Redis is loading the dataset in memory"))
		return cmd
	}
	return c.Client.Do(ctx, args...)
}

// A transient error reply to the probe is not taken for "no SPUBLISH
// here": the release's notice comes. (Taken so, the connection subscribed
// with plain SUBSCRIBE for its whole life and was confirmed (Ready said
// heard), but the release script's SPUBLISH, which succeeds on Redis 7,
// reached only sharded subscribers: every release was missed while Ready
// claimed none would be.)
func TestATransientProbeErrorDoesNotMakeTheConnectionPlain(t *testing.T) {
	s := redis7(t)
	c := client(t, s.Addr())
	wrapped := &failFirstDo{Client: c}
	var got heard
	src := func(context.Context, string) (notice.Client, string, error) { return wrapped, "", nil }
	h := notice.New([]notice.Source{src}, got.deliver, notice.Options{Timeout: time.Second})
	l := h.Listen("k")
	defer l.Stop()
	require.Equal(t, 1, l.Ready(t.Context(), 1, 3*time.Second), "confirmed")
	release(t, c, "k", "v1")
	require.Eventually(t, func() bool { return got.count() == 1 }, 3*time.Second, time.Millisecond,
		"Ready confirmed the subscription, yet the release's notice never came (the probe's LOADING made it a plain SUBSCRIBE; the script SPUBLISHed)")
}

// Control of the above: without the probe's error the notice comes.
func TestANoticeComesAfterASuccessfulProbe(t *testing.T) {
	s := redis7(t)
	c := client(t, s.Addr())
	var got heard
	h := notice.New([]notice.Source{notice.Subscribable(c)}, got.deliver, notice.Options{Timeout: time.Second})
	l := h.Listen("k")
	defer l.Stop()
	require.Equal(t, 1, l.Ready(t.Context(), 1, 3*time.Second))
	release(t, c, "k", "v1")
	require.Eventually(t, func() bool { return got.count() == 1 }, 3*time.Second, time.Millisecond)
}

// A real Redis 7 busy with a long script while a key is first listened:
// the probe (SPUBLISH) gets -BUSY, and the subscription that follows is
// refused with -BUSY too; once the script ended the key is subscribed and
// its release heard. (The reader once took the refusal as final, sent
// stayed set, and the key was never subscribed on this connection, even
// long after the script ended.)
func TestAKeyListenedDuringABusyScriptIsSubscribedOnceItEnds(t *testing.T) {
	s := redis7(t)
	c := client(t, s.Addr())
	// The script's caller waits as long as the script runs: about a second
	// on a quiet machine, several beside CPU burners, past go-redis's 3 s
	// default read timeout (stress.sh once saw it time out there).
	admin := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: time.Minute})
	t.Cleanup(func() { admin.Close() })
	require.NoError(t, admin.ConfigSet(t.Context(), "busy-reply-threshold", "10").Err())
	busy := make(chan error, 1)
	go func() {
		// about a second of pure Lua
		busy <- admin.Eval(context.Background(), "local i = 0 while i < 150000000 do i = i + 1 end return 1", nil).Err()
	}()
	time.Sleep(200 * time.Millisecond) // past busy-reply-threshold
	var got heard
	h := notice.New([]notice.Source{notice.Subscribable(c)}, got.deliver, notice.Options{Timeout: time.Second})
	l := h.Listen("k")
	defer l.Stop()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, <-busy, "the busy script")
	n := l.Ready(t.Context(), 1, 5*time.Second)
	release(t, c, "k", "v1")
	ok := false
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && !ok {
		ok = got.count() == 1
		time.Sleep(time.Millisecond)
	}
	ch, _ := notice.Channel("k")
	shard, _ := admin.PubSubShardNumSub(t.Context(), ch).Result()
	plain, _ := admin.PubSubNumSub(t.Context(), ch).Result()
	require.True(t, ok && n == 1, "after the script ended: Ready got %d of 1; notice delivered %v; server has %d sharded and %d plain subscribers of %s", n, ok, shard[ch], plain[ch], ch)
}
