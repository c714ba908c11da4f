package wire

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/quorum"
)

// submitted is one command submitted to a pipeline on its own round.
type submitted struct {
	round *quorum.Round[Outcome]
	calls *tracker
}

// submitDo queues args on p, as fanOut would for one node.
func submitDo(p *pipeline, args ...any) (submitted, bool) {
	s := submitted{round: quorum.Begin[Outcome](1), calls: &tracker{}}
	s.calls.add(1)
	read := func(_ int, cmd *redis.Cmd) (Outcome, error) {
		if err := cmd.Err(); err != nil {
			return Failed, err
		}
		return Granted, nil
	}
	key := ""
	if len(args) > 1 {
		key = fmt.Sprint(args[1])
	}
	j := job{cmd: redis.NewCmd(context.Background(), args...), key: key, timeout: time.Minute, to: &roundReceiver{round: s.round, read: read, calls: s.calls}}
	return s, p.submit(j)
}

func (p *Pipeline[R]) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.senders == 0 && len(p.queue) == 0 && len(p.busy) == 0
}

// counted returns a pipeline over a client of a fresh miniredis, with hooks
// counting its batches.
func counted(t *testing.T, hooks *redistest.Batches) (*miniredis.Miniredis, *redis.Client, *pipeline) {
	t.Helper()
	m := redistest.Miniredis(t)
	_ = m.Set("redlock:memory", "0 ?") // trusted: see trust in redlock's helpers_test.go
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	client.AddHook(hooks)
	return m, client, &pipeline{client: client}
}

// blackholed returns a pipeline, with hooks counting its batches, over a
// client (no retries, readTimeout) connected through proxy to a fresh
// miniredis, and then black-holes the proxy: the node stops answering.
func blackholed(t *testing.T, hooks *redistest.Batches, readTimeout time.Duration) (*faultnet.Proxy, *redis.Client, *pipeline) {
	t.Helper()
	m := redistest.Miniredis(t)
	_ = m.Set("redlock:memory", "0 ?") // trusted: see trust in redlock's helpers_test.go
	proxy, err := faultnet.Listen(m.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: readTimeout, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	client.AddHook(hooks)
	require.NoError(t, client.Ping(t.Context()).Err()) // connected before the fault
	proxy.SetBlackhole(true)
	return proxy, client, &pipeline{client: client}
}

// Commands from concurrent callers on each key run in the order each caller
// queued them, all complete, and the senders end when the queue is empty.
func TestPipelineKeepsOrder(t *testing.T) {
	hooks := &redistest.Batches{}
	_, client, p := counted(t, hooks)

	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				list := "list" // shared, and one per caller
				if i%2 == 1 {
					list = "list:" + strconv.Itoa(g)
				}
				s, ok := submitDo(p, "RPUSH", list, g*1000+i)
				if !ok {
					t.Error("queue full")
					return
				}
				if i%3 == 0 { // and sometimes queue more before the reply
					continue
				}
				if _, err := s.round.Result(0); err != nil {
					t.Errorf("RPUSH: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Eventually(t, p.idle, time.Second, time.Millisecond, "every command answered")
	lists := []string{"list"}
	for g := range 16 {
		lists = append(lists, "list:"+strconv.Itoa(g))
	}
	total := 0
	for _, list := range lists {
		vals, err := client.LRange(t.Context(), list, 0, -1).Result()
		require.NoError(t, err)
		total += len(vals)
		last := map[int]int{} // each caller's pushes must keep their order
		for _, v := range vals {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			g, i := n/1000, n%1000
			if prev, ok := last[g]; ok {
				require.Greater(t, i, prev, "%s: caller %d's push %d after %d", list, g, i, prev)
			}
			last[g] = i
		}
	}
	require.Equal(t, 16*200, total)
	require.Eventually(t, p.idle, time.Second, time.Millisecond, "the sender must end when idle")
	sent := 0
	for _, n := range hooks.Pipelines() {
		sent += n
	}
	assert.Equal(t, 16*200, sent)
	t.Logf("3,200 commands in %d pipelines", len(hooks.Pipelines()))
}

// Commands queued while a batch is in flight go out together in the next
// one, up to batchMax, in order.
func TestPipelineBatchesWhatWaits(t *testing.T) {
	hooks := &redistest.Batches{Hold: make(chan struct{})}
	_, client, p := counted(t, hooks)

	first, ok := submitDo(p, "RPUSH", "list", -1)
	require.True(t, ok)
	require.Eventually(t, func() bool { return len(hooks.Pipelines()) == 1 }, time.Second, time.Millisecond)
	var rest []submitted
	for i := range batchMax + 10 {
		s, ok := submitDo(p, "RPUSH", "list", i)
		require.True(t, ok)
		rest = append(rest, s)
	}
	close(hooks.Hold)
	for _, s := range append(rest, first) {
		_, err := s.round.Result(0)
		require.NoError(t, err)
	}
	assert.Equal(t, []int{1, batchMax, 10}, hooks.Pipelines())
	vals, err := client.LRange(t.Context(), "list", 0, -1).Result()
	require.NoError(t, err)
	for i, v := range vals {
		assert.Equal(t, strconv.Itoa(i-1), v)
	}
}

// A node that stops answering holds one batch; commands queue behind it up
// to PipelineQueue, and further ones are refused at once. When the client's
// read timeout ends the stuck batch, every queued command is answered and
// the sender ends.
func TestPipelineBoundsAHungNode(t *testing.T) {
	hooks := &redistest.Batches{}
	proxy, _, p := blackholed(t, hooks, 300*time.Millisecond)

	stuck, ok := submitDo(p, "PING")
	require.True(t, ok)
	require.Eventually(t, func() bool { return len(hooks.Pipelines()) == 1 }, time.Second, time.Millisecond)
	var queued []submitted
	refused := 0
	for range PipelineQueue + 100 {
		s, ok := submitDo(p, "PING")
		if !ok {
			refused++
			continue
		}
		queued = append(queued, s)
	}
	assert.Len(t, queued, PipelineQueue, "the queue holds PipelineQueue commands")
	assert.Equal(t, 100, refused, "past the bound, submissions are refused at once")

	_, err := stuck.round.Result(0)
	assert.Error(t, err, "the stuck batch ends with the read timeout")
	proxy.SetBlackhole(false)
	proxy.DropConnections()
	for _, s := range queued {
		s.round.Result(0) // answered, one way or the other
		require.NoError(t, s.calls.wait(t.Context()))
	}
	require.Eventually(t, p.idle, 5*time.Second, time.Millisecond, "the sender must end when idle")
}

// Once a batch has been in flight for stallAfter, the node counts as no
// longer answering: the commands queued behind the batch fail at once, and
// so do new ones, instead of waiting to be replayed when the node wakes up.
// A batch that comes back ends that.
func TestPipelineFailsFastWhenTheNodeStopsAnswering(t *testing.T) {
	hooks := &redistest.Batches{}
	proxy, client, p := blackholed(t, hooks, time.Second)
	p.stallAfter = 100 * time.Millisecond

	stuck, ok := submitDo(p, "RPUSH", "k", "stuck")
	require.True(t, ok)
	require.Eventually(t, func() bool { return len(hooks.Pipelines()) == 1 }, time.Second, time.Millisecond)
	var queued []submitted
	for i := range 10 {
		s, ok := submitDo(p, "RPUSH", "k", i)
		require.True(t, ok, "before stallAfter, commands queue")
		queued = append(queued, s)
	}
	time.Sleep(150 * time.Millisecond)
	_, ok = submitDo(p, "RPUSH", "k", "late")
	assert.False(t, ok, "past stallAfter, new commands are refused")
	for _, s := range queued {
		select {
		case <-s.round.Settled(0):
			_, err := s.round.Result(0)
			assert.ErrorIs(t, err, ErrNodeBusy)
		default:
			t.Fatal("a queued command still waits behind the stuck batch")
		}
	}

	proxy.SetBlackhole(false)
	proxy.DropConnections()
	_, err := stuck.round.Result(0)
	assert.Error(t, err, "the stuck batch ends with the read timeout")
	require.Eventually(t, func() bool {
		s, ok := submitDo(p, "RPUSH", "k", "after")
		if ok {
			_, err := s.round.Result(0)
			return err == nil
		}
		return false
	}, 5*time.Second, 10*time.Millisecond, "once the batch is back, commands go through again")
	vals, err := client.LRange(t.Context(), "k", 0, -1).Result()
	require.NoError(t, err)
	assert.NotContains(t, vals, "0", "a command failed at the stall must never run")
	require.Eventually(t, p.idle, time.Second, time.Millisecond)
}

// A node that lost its scripts answers EVALSHA with NOSCRIPT; the sender
// resends those scripts with EVAL before anything queued after them.
func TestPipelineResendsScriptsAfterNoscript(t *testing.T) {
	hooks := &redistest.Batches{}
	m, client, p := counted(t, hooks)
	require.NoError(t, m.Set("k", "v"))
	release := loadScript("release", releaseScript.Calls)
	require.NoError(t, release.TrustFrom(t.Context(), client), "its digest known: it goes as EVALSHA")
	require.NoError(t, client.ScriptFlush(t.Context()).Err())

	round := quorum.Begin[Outcome](1)
	calls := &tracker{}
	calls.add(1)
	c := ScriptCommand(release, []string{"k"}, "v")
	require.True(t, p.submit(job{cmd: redis.NewCmd(t.Context(), c.Wire()...), key: c.Key, timeout: time.Second, src: c.source(), to: &roundReceiver{round: round, read: readScript, calls: calls}}))
	o, err := round.Result(0)
	require.NoError(t, err)
	assert.Equal(t, Granted, o)
	assert.False(t, m.Exists("k"))
	assert.Equal(t, []int{1, 1}, hooks.Pipelines(), "EVALSHA, then EVAL alone")
}

// On a far node (batches slow to come back), a batch in flight holds back
// later commands on its keys only: a command on another key goes out on
// another connection once it has waited pipelineLinger, and one on the held
// key waits for the batch. On a near node both wait for the batch in
// flight, which is soon back, and go out together.
func TestPipelineHoldsBackOnlyTheKeysInFlight(t *testing.T) {
	for _, far := range []bool{true, false} {
		t.Run(map[bool]string{true: "far node", false: "near node"}[far], func(t *testing.T) {
			hooks := &redistest.Batches{Hold: make(chan struct{})}
			_, client, p := counted(t, hooks)
			if far {
				p.rtt = farRTT
			}

			first, ok := submitDo(p, "RPUSH", "held", "1")
			require.True(t, ok)
			require.Eventually(t, func() bool { return len(hooks.Pipelines()) == 1 }, time.Second, time.Millisecond)
			same, ok := submitDo(p, "RPUSH", "held", "2")
			require.True(t, ok)
			other, ok := submitDo(p, "RPUSH", "other", "1")
			require.True(t, ok)

			if far {
				select {
				case <-other.round.Settled(0):
				case <-time.After(5 * time.Second):
					t.Fatal("a command on another key waited for the batch in flight")
				}
			}
			var otherSettled <-chan struct{} // on a near node, other must wait too
			if !far {
				otherSettled = other.round.Settled(0)
			}
			select {
			case <-same.round.Settled(0):
				t.Fatal("a command on the held key overtook the batch in flight")
			case <-otherSettled:
				t.Fatal("a near node sent a second batch while one was in flight")
			case <-time.After(50 * time.Millisecond):
			}
			close(hooks.Hold)
			for _, s := range []submitted{first, same, other} {
				_, err := s.round.Result(0)
				require.NoError(t, err)
			}
			vals, err := client.LRange(t.Context(), "held", 0, -1).Result()
			require.NoError(t, err)
			assert.Equal(t, []string{"1", "2"}, vals)
			require.Eventually(t, p.idle, time.Second, time.Millisecond)
			if !far {
				assert.Equal(t, []int{1, 2}, hooks.Pipelines(), "the waiting commands go out together")
			}
		})
	}
}

// With WaitReplicas, the auto-pipeline sends one WAIT per batch, behind the
// batch's commands on the same connection (WAIT covers every earlier write
// of its connection), not one per command; every command of the batch gets
// the WAIT's verdict.
func TestPipelineSendsOneWaitPerBatch(t *testing.T) {
	hooks := &redistest.Batches{Hold: make(chan struct{})}
	m, _, p := counted(t, hooks)
	p.wait = NewWait(1, false, time.Second)
	var waits atomic.Int32
	m.Server().SetPreHook(func(c *server.Peer, cmd string, _ ...string) bool {
		if !strings.EqualFold(cmd, "WAIT") {
			return false
		}
		waits.Add(1)
		c.WriteInt(1)
		return true
	})
	submit := func(key string) submitted {
		s := submitted{round: quorum.Begin[Outcome](1), calls: &tracker{}}
		s.calls.add(1)
		read := func(_ int, cmd *redis.Cmd) (Outcome, error) {
			if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
				return Failed, err
			}
			return Granted, nil
		}
		j := job{cmd: redis.NewCmd(context.Background(), "SET", key, "v", "NX", "PX", 60000, "GET"), key: key, replicate: true,
			timeout: time.Minute, to: &roundReceiver{round: s.round, read: read, calls: s.calls}}
		require.True(t, p.submit(j))
		return s
	}

	first := submit("first")
	require.Eventually(t, func() bool { return len(hooks.Pipelines()) == 1 }, time.Second, time.Millisecond)
	var rest []submitted
	for i := range 20 {
		rest = append(rest, submit("k"+strconv.Itoa(i)))
	}
	close(hooks.Hold)
	for _, s := range append(rest, first) {
		o, err := s.round.Result(0)
		require.NoError(t, err)
		require.Equal(t, Granted, o)
	}
	assert.Equal(t, []int{2, 21}, hooks.Pipelines(), "each batch: its commands and one WAIT")
	assert.EqualValues(t, 2, waits.Load(), "one WAIT per batch")
}
