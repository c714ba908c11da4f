package wire

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	oexec "os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
)

// onceReceiver wraps a Receiver and counts its deliveries, so that a
// second delivery of one call is seen (the tracker would panic on it).
type onceReceiver struct {
	to    Receiver
	n     atomic.Int32
	t     *testing.T
	label string
}

func (r *onceReceiver) Receive(i int, rep Reply) {
	if r.n.Add(1) > 1 {
		r.t.Errorf("%s delivered twice", r.label)
		return
	}
	r.to.Receive(i, rep)
}

// The random schedules of TestPipelineReleaseIsLastUnderRandomSchedules
// with a round-trip hook that ends its sender (runtime.Goexit) on a random
// third of the batches: every call is answered exactly once, a release
// that reported done leaves its value nowhere, and once idle the pipeline
// holds no key, no batch in flight and no sender.
func TestPipelineReleaseIsLastWhenATripHookEndsItsSender(t *testing.T) {
	schedules := 60
	if testing.Short() {
		schedules = 15
	}
	m, g, client, admin := gatedServer(t)
	var total atomic.Int32
	defer func() { t.Logf("senders ended by the hook: %d", total.Load()) }()
	for seed := range schedules {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			var hookMu sync.Mutex
			hookRng := rand.New(rand.NewPCG(uint64(seed), 13))
			var exits atomic.Int32
			var p *pipeline
			p = &pipeline{client: client, onTrip: func(RoundTrip) {
				p.mu.Lock()
				senders := p.senders
				p.mu.Unlock()
				if senders < 1 || senders > maxSenders {
					t.Errorf("%d senders while one reports a trip", senders)
				}
				hookMu.Lock()
				die := hookRng.IntN(3) == 0
				hookMu.Unlock()
				if die {
					exits.Add(1)
					runtime.Goexit()
				}
			}}
			once := func(to Receiver, label string) Receiver { return &onceReceiver{to: to, t: t, label: label} }
			releaseSchedule{m: m, g: g, admin: admin, keys: 3, stream: 11}.run(t, p, seed, once)
			require.Eventually(t, func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return p.senders == 0 && len(p.busy) == 0 && len(p.sending) == 0 && len(p.queue) == 0
			}, 5*time.Second, time.Millisecond, "the pipeline is not idle")
			total.Add(exits.Load())
		})
	}
}

// goexitHook is a go-redis hook that ends the goroutine sending the first
// command whose first argument is "boom" (as t.FailNow or require.* in a
// user's hook on the *redis.Client would).
type goexitHook struct{ once sync.Once }

func (h *goexitHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *goexitHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if len(cmd.Args()) > 1 && cmd.Args()[1] == "boom" {
			h.once.Do(runtime.Goexit)
		}
		return next(ctx, cmd)
	}
}

func (h *goexitHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if len(cmd.Args()) > 1 && cmd.Args()[1] == "boom" {
				h.once.Do(runtime.Goexit)
			}
		}
		return next(ctx, cmds)
	}
}

// A Goexit in a go-redis hook on the node's client, while the batch is
// sent, still answers the call, as failed (ErrHookExited): never as a
// reply it did not get (a SET with none would read as granted); and the
// pipeline sends on. (Once the call was never answered.)
func TestGoexitInClientHookOnAPipelinedCallFailsItAndThePipelineSendsOn(t *testing.T) {
	m := redistest.Miniredis(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	client.AddHook(&goexitHook{})
	p := NewPipeline[struct{}](client, nil, nil, 0, nil)
	got := make(replies, 2)
	p.Submit(t.Context(), Command{Key: "boom", Args: []any{"SET", "boom", "v"}}, Send{Timeout: time.Second}, got, 0)
	select {
	case r := <-got:
		if !errors.Is(r.Cmd.Err(), ErrHookExited) {
			t.Fatalf("the SET's reply: %v, want ErrHookExited", r.Cmd.Err())
		}
		p.Submit(t.Context(), Command{Key: "other", Args: []any{"SET", "other", "v"}}, Send{Timeout: time.Second}, got, 0)
		select {
		case r := <-got:
			if err := r.Cmd.Err(); err != nil {
				t.Fatalf("the next command: %v", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("the next command was never answered: no sender took over")
		}
	case <-time.After(3 * time.Second):
		p.mu.Lock()
		senders, busy, queued := p.senders, len(p.busy), len(p.queue)
		p.mu.Unlock()
		t.Fatalf("the SET's reply never came (senders %d, keys held %d, queued %d): its sender was abandoned, its batch not answered", senders, busy, queued)
	}
}

// A round-trip hook that panics (not Goexit) still crashes the process,
// loudly, after exec's defer delivered each of the batch's replies once;
// nothing deadlocks first. The pipeline, and the
// direct transport whose Receiver panics after a Goexiting hook, run in a
// child process.
func TestPanicsInHooksAndReceiversCrashAfterOneDeliveryEach(t *testing.T) {
	if mode := os.Getenv("WIRE_PANIC_CHILD"); mode != "" {
		panicChild(mode)
		return
	}
	for _, mode := range []string{"pipeline-hook-panics", "pipeline-receiver-panics", "direct-receiver-panics-after-goexit"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			cmd := oexec.CommandContext(ctx, os.Args[0], "-test.run=^TestPanicsInHooksAndReceiversCrashAfterOneDeliveryEach$", "-test.count=1")
			cmd.Env = append(os.Environ(), "WIRE_PANIC_CHILD="+mode)
			out, err := cmd.CombinedOutput()
			require.NoError(t, ctx.Err(), "the child hung (deadlock before the crash?):\n%s", out)
			require.Error(t, err, "the child did not crash:\n%s", out)
			s := string(out)
			require.Contains(t, s, "panic: deliberate", "not the hook's panic:\n%s", s)
			for i := range 2 {
				n := strings.Count(s, fmt.Sprintf("delivered %d\n", i))
				require.LessOrEqual(t, n, 1, "job %d delivered %d times:\n%s", i, n, s)
			}
			if mode == "pipeline-hook-panics" {
				for i := range 2 {
					require.Contains(t, s, fmt.Sprintf("delivered %d\n", i), "the deferred delivery missed job %d:\n%s", i, s)
				}
			}
		})
	}
}

type printReceiver struct {
	i     int
	panic bool
}

func (r printReceiver) Receive(_ int, rep Reply) {
	fmt.Fprintf(os.Stderr, "delivered %d\n", r.i)
	if r.panic {
		panic("deliberate: receiver")
	}
}

func panicChild(mode string) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	switch mode {
	case "pipeline-hook-panics", "pipeline-receiver-panics":
		var p *pipeline
		if mode == "pipeline-hook-panics" {
			p = &pipeline{client: client, onTrip: func(RoundTrip) { panic("deliberate: hook") }}
		} else {
			p = &pipeline{client: client, onTrip: func(RoundTrip) {}}
		}
		p.mu.Lock()
		for i := range 2 {
			key := fmt.Sprint("k", i)
			p.queue = append(p.queue, job{cmd: redis.NewCmd(context.Background(), "SET", key, "v"), key: key, timeout: time.Second, to: printReceiver{i: i, panic: mode == "pipeline-receiver-panics"}})
		}
		p.startSender()
		p.mu.Unlock()
	case "direct-receiver-panics-after-goexit":
		d := NewDirect[struct{}](client, nil, nil, func(RoundTrip) { runtime.Goexit() })
		d.Submit(context.Background(), Command{Key: "k", Args: []any{"SET", "k", "v"}}, Send{Timeout: time.Second}, printReceiver{i: 0, panic: true}, 0)
	}
	time.Sleep(5 * time.Second)
	fmt.Fprintln(os.Stderr, "no crash")
	os.Exit(0)
}

// The direct transport, likewise: a Goexit in a go-redis hook during the
// call answers it as failed, once, after Finish.
func TestGoexitInClientHookOnADirectCall(t *testing.T) {
	m := redistest.Miniredis(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	client.AddHook(&goexitHook{})
	d := NewDirect[struct{}](client, nil, nil, nil)
	got := make(replies, 2)
	finished := make(chan struct{})
	d.Submit(t.Context(), Command{Key: "boom", Args: []any{"SET", "boom", "v"}}, Send{Timeout: time.Second, Finish: func() { close(finished) }}, got, 0)
	select {
	case r := <-got:
		if !errors.Is(r.Cmd.Err(), ErrHookExited) {
			t.Fatalf("the SET's reply: %v, want ErrHookExited", r.Cmd.Err())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the SET's reply never came")
	}
	select {
	case <-finished:
	default:
		t.Fatal("Finish was not called before the reply")
	}
	select {
	case r := <-got:
		t.Fatalf("a second reply: %v", r.Cmd.Err())
	case <-time.After(100 * time.Millisecond):
	}
}
