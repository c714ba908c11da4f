package wire

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// One batch of a Pipeline on the wire (see Pipeline): its commands in one
// write, the WAIT that follows the writes, the commands that run again (a
// script's NOSCRIPT, a replica's READONLY), and each reply delivered to its
// command's receiver.

// exec sends batch as one pipeline and delivers every reply. Its context
// ends when the longest of its commands' timeouts has passed, which bounds
// dialing and retries (and socket reads and writes, for clients with
// ContextTimeoutEnabled); the client's own timeouts bound the rest. Errors
// are set on each command. In order: the batch goes with what rides behind
// it; what must run again runs again, in order per key; then the WAIT and
// the rider judge, and every reply is delivered.
func (p *Pipeline[R]) exec(batch []job) {
	var timeout time.Duration
	for i := range batch {
		timeout = max(timeout, batch[i].timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Every call in the batch is answered exactly once, even where a hook
	// ends this goroutine (runtime.Goexit: a go-redis hook on the client
	// while the batch is sent, or onTrip): with its reply once the replies
	// are read and judged, else as failed (ErrHookExited), never as a
	// reply it did not get (a SET without one would read as granted). send
	// then hands the keys and the queue on (abandon).
	judged := false
	var received time.Time
	defer func() { // the one place the batch's replies go
		for i := range batch {
			if !judged {
				batch[i].cmd.SetErr(ErrHookExited)
			}
			batch[i].deliver(received)
		}
	}()
	t := p.sendBatch(ctx, batch)
	waitAgain, reran := p.runAgain(ctx, batch, t.wait != nil)
	if t.wait != nil {
		p.judgeWaits(batch, t.wait, waitAgain)
	}
	if p.rider != nil {
		for i := range batch {
			if err := batch[i].cmd.Err(); err != nil && err != redis.Nil && redis.HasErrorPrefix(err, "READONLY") {
				p.rider.Demoted()
				break
			}
		}
	}
	if t.guarded {
		// After any rerun: a NOSCRIPT means a new server process, so the
		// guard examines the node, and its verdict covers the reruns too.
		verdict := p.rider.Judge(ctx, p.client, t.ride, Trip{Sent: t.sent, Received: t.received, Suspect: reran})
		for i := range batch {
			if batch[i].guarded {
				batch[i].verdict = verdict
			}
		}
	}
	received = t.received
	if reran {
		received = time.Now() // the reruns' replies came back after the batch's
	}
	judged = true
	// The round trip is reported once everything about it is decided (the
	// verdicts, the times), before the replies go: what hears of it can
	// change none of that, and Drain, which waits for the replies, covers
	// it.
	if p.onTrip != nil { // one round trip for the whole batch
		trip := RoundTrip{Sent: t.sent, Received: t.received, Commands: len(batch), Command: batch[0].name()}
		for i := range batch {
			if trip.Err = tripError(batch[i].cmd.Err(), batch[i].timeout); trip.Err != nil {
				break
			}
		}
		p.onTrip(trip)
	}
}

// batchTrip is a batch's first trip: what rode with it, and when it went.
type batchTrip[R any] struct {
	wait           *redis.Cmd // the WAIT behind the batch; nil: none
	ride           R          // the rider's commands, where guarded
	guarded        bool
	sent, received time.Time
}

// sendBatch sends the batch's commands as one pipeline (a lone command on
// go-redis's plain path, which costs less), followed by the rider's
// commands if any command is guarded and by one WAIT if any must be
// replicated, and sets the raw replies on their commands.
func (p *Pipeline[R]) sendBatch(ctx context.Context, batch []job) batchTrip[R] {
	var t batchTrip[R]
	// One WAIT at the end of a batch covers every write before it on the
	// connection (Options.WaitReplicas).
	if p.wait != nil && replicates(batch) {
		t.wait = redis.NewCmd(ctx, p.wait.args...)
	}
	// The rider's commands (the guard's companions) follow the batch's
	// commands: one set per batch vouches for every guarded command before
	// it.
	first := guards(batch)
	t.guarded = p.rider != nil && first >= 0
	if t.guarded {
		t.ride = p.rider.Board(ctx, batch[first].key)
	}
	t.sent = time.Now()
	if len(batch) == 1 && t.wait == nil && !t.guarded {
		_ = p.client.Process(ctx, batch[0].outgoing())
	} else {
		b := p.batchPipe()
		for i := range batch {
			b.cmds = append(b.cmds, batch[i].outgoing())
		}
		if t.guarded {
			b.cmds = p.rider.AppendTo(t.ride, b.cmds)
		}
		if t.wait != nil {
			b.cmds = append(b.cmds, t.wait)
		}
		_ = b.pipe.BatchProcess(ctx, b.cmds...)
		exec(ctx, b.pipe)
		p.putPipe(b)
	}
	t.received = time.Now()
	for i := range batch {
		if j := &batch[i]; j.raw != nil {
			setRaw(j.cmd, j.raw)
		}
	}
	return t
}

// runAgain runs again what must: a node that lost its script cache (a
// restart, SCRIPT FLUSH) answers EVALSHA with NOSCRIPT, and the commands
// behind it on the same key have run out of order (a release before its
// own SET, which would then stay for its TTL). So that command and every
// later one on its key run again, in order, while the batch still holds the
// key. A command that names several keys runs again if any of them is to,
// and then every later command on any of them runs again too: it may have
// run before it. An error reply read raw goes again the same way, as a
// plain command that go-redis reads (see rawreply.go), and so does a
// READONLY (see runsAgain). With waited, a second WAIT follows the reruns; it is
// returned. reran reports whether anything ran again.
func (p *Pipeline[R]) runAgain(ctx context.Context, batch []job, waited bool) (waitAgain *redis.Cmd, reran bool) {
	var again redis.Pipeliner
	var redo map[string]bool // keys whose remaining commands run again
	for i := range batch {
		j := &batch[i]
		if !j.names(redo) && !runsAgain(j) {
			continue
		}
		if again == nil {
			again = p.client.Pipeline()
		}
		redo = j.addTo(redo)
		// A release runs again too, after the commands before it on its
		// key (an extension that heals would otherwise set the key again
		// after it: see the invariant at Pipeline). If it had deleted its
		// value already, it stays reported so (deletedFirst).
		if j.role == RoleReleases && j.cmd.Err() == nil {
			if n, _ := j.cmd.Int64(); n == 1 || n == 2 {
				j.deletedFirst = int8(n)
			}
		}
		j.cmd = j.anew(ctx)
		j.rerun = true
		_ = again.Process(ctx, j.cmd)
	}
	if again == nil {
		return nil, false
	}
	if waited {
		waitAgain = redis.NewCmd(ctx, p.wait.within(ctx)...)
		_ = again.Process(ctx, waitAgain)
	}
	exec(ctx, again)
	for i := range batch {
		if j := &batch[i]; j.deletedFirst != 0 {
			if n, err := j.cmd.Int64(); err != nil || n != int64(j.deletedFirst) {
				j.cmd.SetErr(nil)
				j.cmd.SetVal(int64(j.deletedFirst)) // its first run deleted the value
			}
		}
	}
	return waitAgain, true
}

// judgeWaits gives each command that must be replicated the verdict of the
// WAIT that followed it: the batch's, or for a command that ran again, the
// rerun's (waitAgain).
func (p *Pipeline[R]) judgeWaits(batch []job, wait, waitAgain *redis.Cmd) {
	first := p.wait.Verdict(wait)
	var second error
	if waitAgain != nil {
		second = p.wait.Verdict(waitAgain)
	}
	for i := range batch {
		switch j := &batch[i]; {
		case !j.replicate:
		case j.rerun:
			j.notReplicated = second
		default:
			j.notReplicated = first
		}
	}
}

// batchPipe is a go-redis pipeline kept for the next batch, with the slice
// a batch's commands are gathered in. Why: a lone guarded command (one
// caller, the common case) needs a pipeline for its companions, and a new
// one per batch costs a handful of allocations on the hot path; Exec leaves
// a pipeline empty and ready for reuse.
type batchPipe struct {
	pipe redis.Pipeliner
	cmds []redis.Cmder
}

// runsAgain reports whether j's command goes again after its batch: a
// script that met NOSCRIPT, an error reply read raw, or READONLY (a
// demoted primary on a connection opened before its failover). go-redis
// retires a connection that answers READONLY, and retries on another, but
// only when the READONLY is its pipeline's first reply; the command sent
// again is first in a pipeline of its own, usually on the connection just
// put back, so that a demoted primary's connections are left.
func runsAgain(j *job) bool {
	err := j.cmd.Err()
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	return readAgain(err) || (j.src != "" && redis.HasErrorPrefix(err, "NOSCRIPT")) || redis.HasErrorPrefix(err, "READONLY")
}

// batchPipe returns a pipeline to send one batch on, empty.
func (p *Pipeline[R]) batchPipe() *batchPipe {
	if b, ok := p.pipes.Get().(*batchPipe); ok {
		return b
	}
	return &batchPipe{pipe: p.client.Pipeline()}
}

// putPipe keeps b, sent, for another batch, holding no command.
func (p *Pipeline[R]) putPipe(b *batchPipe) {
	clear(b.cmds)
	b.cmds = b.cmds[:0]
	p.pipes.Put(b)
}

// guards returns the index of the batch's first command the rider judges,
// -1 if none.
func guards(batch []job) int {
	for i := range batch {
		if batch[i].guarded {
			return i
		}
	}
	return -1
}

// replicates reports whether a batch holds a write whose grant must be
// replicated.
func replicates(batch []job) bool {
	for i := range batch {
		if batch[i].replicate {
			return true
		}
	}
	return false
}

// outgoing is the command that carries j: its RawCmd, or its Cmd.
func (j *job) outgoing() redis.Cmder {
	if j.raw != nil {
		return j.raw
	}
	return j.cmd
}

// name is j's command name as sent (Command.Name): "evalsha" for a script,
// though it went as EVAL while its digest was unknown, or in a rerun after
// NOSCRIPT.
func (j *job) name() string {
	if j.src != "" {
		return "evalsha"
	}
	return j.cmd.Name()
}

// anew returns j's command to send again: a script in full (EVAL), anything
// else as it was.
func (j *job) anew(ctx context.Context) *redis.Cmd {
	args := j.cmd.Args() // for a script: evalsha, its digest (or eval, its source), numkeys, keys and args
	again := make([]any, len(args))
	copy(again, args)
	if j.src != "" {
		again[0], again[1] = "eval", j.src
	}
	return redis.NewCmd(ctx, again...)
}
