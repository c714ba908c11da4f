package redlock

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/quorum"
)

// pipeline is the transport New gives each *redis.Client node (unless
// Options.NoAutoPipeline): one sender per node that writes whatever commands
// are waiting as one pipeline, on one connection at a time, and reads their
// replies (auto-pipelining, as rueidis does).
//
// Why: a lock cycle is ten tiny commands (a SET and a release on each of five
// nodes). Sent one per pooled connection, each costs a write and a read
// system call on both sides, and those calls, not Redis, are what a busy
// client spends its CPU on. Under concurrency a pipeline carries many
// cycles' commands in one write; with a single caller it is one command per
// write, as before.
//
// What it keeps:
//   - FIFO per node. Commands reach the node in the order they were queued,
//     one batch after the other, so a release queued after its SET always
//     follows it, and an acquisition queued after a release of the same key
//     follows that. No call needs to wait for another before it is queued.
//   - No goroutine per call, and none at all while idle: the sender starts
//     when the first command is queued and ends when the queue is empty.
//     Replies are delivered straight into the round's vote.
//   - A bounded queue. A node that stops answering holds its batch until the
//     client's read timeout; commands queued meanwhile wait, up to
//     pipelineQueue of them, and further ones fail at once (errNodeBusy).
//     The vote never waits for them: NodeTimeout decides.
type pipeline struct {
	client *redis.Client

	mu      sync.Mutex
	queue   []job
	spare   []job // the previous batch's slice, reused for the next queue
	running bool  // a sender goroutine is running

	// concurrent: the last batch carried more than one command, so more
	// callers are likely about to queue. Only the sender uses it.
	concurrent bool
}

// pipelineQueue bounds the commands waiting for one node's sender; batchMax
// bounds one pipeline. Together they bound what a hung node holds.
const (
	pipelineQueue = 1024
	batchMax      = 256
)

// job is one queued command and where its reply goes.
type job struct {
	cmd     *redis.Cmd
	timeout time.Duration // the batch carrying it may take this long
	src     string        // a script's source, resent with EVAL after NOSCRIPT; "" for other commands
	round   *quorum.Round[Outcome]
	node    int
	read    func(node int, cmd *redis.Cmd) (Outcome, error)
	calls   *tracker
}

func (j *job) deliver() {
	o, err := j.read(j.node, j.cmd)
	j.round.Deliver(j.node, o, err)
	j.calls.done()
}

// submit queues j, starting the sender if it is not running. It reports
// false, queuing nothing, when the queue is full.
func (p *pipeline) submit(j job) bool {
	p.mu.Lock()
	if len(p.queue) >= pipelineQueue {
		p.mu.Unlock()
		return false
	}
	p.queue = append(p.queue, j)
	start := !p.running
	p.running = true
	p.mu.Unlock()
	if start {
		go p.send()
	}
	return true
}

// send sends batches until the queue is empty.
func (p *pipeline) send() {
	var batch []job
	for {
		batch = p.take(batch)
		if len(batch) == 0 {
			return
		}
		if p.concurrent {
			// Let callers that are about to queue do so: under load one
			// yield deepens the batch. A lone caller skips it, so that its
			// command goes out at once.
			runtime.Gosched()
			batch = p.takeMore(batch)
		}
		p.concurrent = len(batch) > 1
		p.exec(batch)
		clear(batch) // drop the finished commands and rounds
	}
}

// take swaps the queue for the (empty) batch slice, up to batchMax jobs. It
// clears running when there is nothing to take, so that the next submit
// starts a sender.
func (p *pipeline) take(batch []job) []job {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		p.running = false
		p.spare = batch[:0] // for the next sender
		return nil
	}
	if batch == nil {
		batch, p.spare = p.spare, nil
	}
	if len(p.queue) <= batchMax {
		batch, p.queue = p.queue, batch[:0]
		return batch
	}
	batch = append(batch[:0], p.queue[:batchMax]...)
	p.queue = p.queue[:copy(p.queue, p.queue[batchMax:])]
	return batch
}

// takeMore moves jobs queued since take into batch, up to batchMax.
func (p *pipeline) takeMore(batch []job) []job {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(len(p.queue), batchMax-len(batch))
	if n <= 0 {
		return batch
	}
	batch = append(batch, p.queue[:n]...)
	rest := copy(p.queue, p.queue[n:])
	clear(p.queue[rest:])
	p.queue = p.queue[:rest]
	return batch
}

// exec sends batch as one pipeline and delivers every reply. Its context
// ends when the longest of its commands' timeouts has passed, which bounds
// dialing and retries (and socket reads and writes, for clients with
// ContextTimeoutEnabled); the client's own timeouts bound the rest. Errors
// are set on each command.
func (p *pipeline) exec(batch []job) {
	var timeout time.Duration
	for i := range batch {
		timeout = max(timeout, batch[i].timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pipe := p.client.Pipeline()
	for i := range batch {
		_ = pipe.Process(ctx, batch[i].cmd)
	}
	_, _ = pipe.Exec(ctx)

	// A node that lost its script cache (a restart, SCRIPT FLUSH) answers
	// EVALSHA with NOSCRIPT: send those scripts in full, before anything
	// queued later. Commands behind them in this batch have already run;
	// at worst one of this Locker's acquisitions found a value whose
	// release came back NOSCRIPT, which it reports as contention.
	var again redis.Pipeliner
	for i := range batch {
		j := &batch[i]
		if j.src == "" || !redis.HasErrorPrefix(j.cmd.Err(), "NOSCRIPT") {
			continue
		}
		if again == nil {
			again = p.client.Pipeline()
		}
		args := j.cmd.Args() // evalsha, sha1, numkeys, keys and args
		eval := make([]any, len(args))
		copy(eval, args)
		eval[0], eval[1] = "eval", j.src
		j.cmd = redis.NewCmd(ctx, eval...)
		_ = again.Process(ctx, j.cmd)
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
	for i := range batch {
		batch[i].deliver()
	}
}
