package redlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Batched wraps client as a Node that sends, per node, whatever commands are
// waiting as one pipeline on one connection at a time (auto-pipelining).
// Under concurrency this turns many small round trips into few large ones,
// which saves the system calls that dominate a lock cycle's CPU on both
// sides; with a single caller it behaves like the client itself.
//
// Commands to the node run in the order they were queued, one batch after
// another, so a release queued after a SET always follows it. The queue is
// bounded: when it is full (the node stopped answering and its batch is
// stuck until the client's read timeout), further commands fail at once
// with ErrNodeQueueFull instead of waiting. A caller whose context ends
// before its command ran gets the context's error; the command may still
// run later, in order.
//
// Close stops the batching goroutine; it does not close client.
func Batched(client *redis.Client) *BatchedNode {
	b := &BatchedNode{client: client, queue: make(chan *job, batchQueue), stop: make(chan struct{})}
	b.wg.Go(b.run)
	return b
}

// ErrNodeQueueFull is returned by a BatchedNode whose queue is full.
var ErrNodeQueueFull = errors.New("redlock: node's command queue is full (it is not answering)")

const (
	batchQueue = 1024 // commands waiting per node
	batchMax   = 256  // commands per pipeline
)

// BatchedNode is a Node that auto-pipelines; see Batched.
type BatchedNode struct {
	client *redis.Client
	queue  chan *job
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

type job struct {
	cmd  *redis.Cmd
	done chan struct{}
}

// Options returns the client's options, so that New can tell nodes apart.
func (b *BatchedNode) Options() *redis.Options { return b.client.Options() }

// Close stops batching. Commands still queued fail.
func (b *BatchedNode) Close() error {
	b.once.Do(func() { close(b.stop) })
	b.wg.Wait()
	return nil
}

func (b *BatchedNode) run() {
	batch := make([]*job, 0, batchMax)
	for {
		select { // stopping wins over queued work
		case <-b.stop:
			b.failQueued()
			return
		default:
		}
		select {
		case <-b.stop:
			b.failQueued()
			return
		case j := <-b.queue:
			batch = append(batch[:0], j)
		}
		yielded := false
	more:
		for len(batch) < batchMax {
			select {
			case j := <-b.queue:
				batch = append(batch, j)
			default:
				if yielded {
					break more
				}
				// Let callers that are about to queue do so: one yield
				// deepens batches under load and costs nothing when idle.
				yielded = true
				runtime.Gosched()
			}
		}
		pipe := b.client.Pipeline()
		for _, j := range batch {
			_ = pipe.Process(context.Background(), j.cmd)
		}
		// Exec's error is also set on each command; the client's read and
		// write timeouts bound it.
		_, _ = pipe.Exec(context.Background())
		for _, j := range batch {
			close(j.done)
		}
	}
}

func (b *BatchedNode) failQueued() {
	for {
		select {
		case j := <-b.queue:
			j.cmd.SetErr(errors.New("redlock: batched node closed"))
			close(j.done)
		default:
			return
		}
	}
}

// do queues args and waits for the reply, or ctx.
func (b *BatchedNode) do(ctx context.Context, args ...any) *redis.Cmd {
	j := &job{cmd: redis.NewCmd(context.Background(), args...), done: make(chan struct{})}
	select {
	case b.queue <- j:
	default:
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetErr(ErrNodeQueueFull)
		return cmd
	}
	select {
	case <-j.done:
		return j.cmd
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetErr(fmt.Errorf("redlock: batched command: %w", ctx.Err()))
		return cmd
	}
}

func evalArgs(name, script string, keys []string, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}

// Do queues a command.
func (b *BatchedNode) Do(ctx context.Context, args ...any) *redis.Cmd { return b.do(ctx, args...) }

// Eval queues EVAL.
func (b *BatchedNode) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.do(ctx, evalArgs("eval", script, keys, args)...)
}

// EvalSha queues EVALSHA.
func (b *BatchedNode) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return b.do(ctx, evalArgs("evalsha", sha1, keys, args)...)
}

// EvalRO queues EVAL_RO.
func (b *BatchedNode) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.do(ctx, evalArgs("eval_ro", script, keys, args)...)
}

// EvalShaRO queues EVALSHA_RO.
func (b *BatchedNode) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return b.do(ctx, evalArgs("evalsha_ro", sha1, keys, args)...)
}

// ScriptExists is sent directly, unbatched.
func (b *BatchedNode) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return b.client.ScriptExists(ctx, hashes...)
}

// ScriptLoad is sent directly, unbatched.
func (b *BatchedNode) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return b.client.ScriptLoad(ctx, script)
}
