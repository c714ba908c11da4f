package wire

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/internal/luascript"
)

// Pipeline is the transport the coordinator gives each *redis.Client node
// (unless Options.NoAutoPipeline): senders that write whatever commands are waiting
// as one pipeline on a pooled connection and read the replies
// (auto-pipelining, as rueidis does).
//
// Why: a lock cycle is ten tiny commands (a SET and a release on each of five
// nodes). Sent one per pooled connection, each costs a write and a read
// system call on both sides, and those calls, not Redis, are what a busy
// client spends its CPU on. Under concurrency a pipeline carries many
// cycles' commands in one write; with a single caller it is one command per
// write, as before.
//
// What it keeps:
//   - Order per key. Commands on one key reach the node in the order they
//     were queued: while a batch holding a key is in flight, later commands
//     on that key wait for it. So a release queued after its SET follows it,
//     and an acquisition queued after a release of the same key follows
//     that. No call needs to wait for another before it is queued. A
//     command that names several keys (Command.OrderKeys: a multi-key
//     lease's script) is ordered against each of them: it waits while any
//     is held, and a later command on any of them waits behind it, even
//     while the others are free (see take).
//   - No head-of-line wait on slow links. Commands queue behind a batch in
//     flight, which is what makes batches deep on a fast link; but where
//     batches take milliseconds to come back (farRTT), a command that has
//     waited pipelineLinger starts another sender (up to maxSenders), so
//     commands on other keys do not wait for the whole round trip.
//   - No goroutine per call, and none at all while idle: senders start when
//     commands are queued and end when none is left for them. Replies are
//     delivered straight into the round's vote.
//   - Order per key across a lost script cache too. A script goes as
//     EVALSHA once a server named its digest (as EVAL before: see Script).
//     A node that lost its scripts answers EVALSHA with NOSCRIPT; commands
//     behind it in the same batch have run by then. So from the first NOSCRIPT on a key, that
//     command and every later one on the key in the batch run again, in
//     order, before the key is let go (scripts as EVAL); a command that
//     names several keys and runs again does so before every later command
//     on each of them (see runAgain). Every command the coordinator sends
//     may run twice: SET NX with a unique value, the scripts'
//     compare-and-set, and phase 1's retry branch are idempotent.
//   - A bounded queue, and failing fast. A node that stops answering holds
//     its batches until the client's read timeout. Commands queue behind
//     them, up to PipelineQueue; once a batch has been in flight for
//     stallAfter (the node stopped answering), the queued commands fail, and
//     so do new ones (ErrNodeBusy), until a batch comes back. So a node that
//     wakes up runs at most the batches already sent, not a backlog of stale
//     acquisitions. The vote never waits for any of this: NodeTimeout
//     decides. A release refused by a full queue while its own SET still
//     waits in it withdraws the SET instead (see withdraw), so a refusal
//     never leaves a key that was not yet sent.
//   - A release is the last word of its lease on the node. Once a lease's
//     release ran on the node, or was taken as done there, no command of
//     that lease may set its key there again. Where commands are queued,
//     withdrawn and run again, this holds: a release that withdraws its SET
//     withdraws every queued command of the lease with it (withdraw), and a
//     batch that runs a key's commands again runs its releases again too,
//     after the commands before them (exec). Order per key does the rest.
//     TestPipelineReleaseIsLastUnderRandomSchedules checks it.
type Pipeline[R any] struct {
	client     *redis.Client
	names      luascript.Names // the digests the node named (see Submit)
	pipes      sync.Pool       // of *batchPipe: go-redis pipelines to reuse
	wait       *Wait           // WAIT after batches with writes to replicate; nil: none
	rider      Rider[R]        // the node guard, whose companions follow batches with guarded commands; nil: none
	stallAfter time.Duration   // a batch in flight this long means the node stopped answering; 0: never
	onTrip     func(RoundTrip) // hears of every batch's round trip; nil: nothing does

	mu      sync.Mutex
	queue   []job
	busy    map[string]int64    // keys in a batch in flight, and the sender that holds them
	senders int                 // sender goroutines running
	lastID  int64               // the last sender's id
	kick    *time.Timer         // starts another sender for commands left waiting
	kicking bool                // kick is set to fire
	rtt     time.Duration       // recent batches' round trip (moving average)
	sending map[int64]time.Time // when each sender's batch in flight was sent
}

// StallAfter is how long a batch may be in flight before the node counts as
// no longer answering: ten NodeTimeouts, and at least half a second, so that
// a slow reply is not taken for a dead node.
func StallAfter(nodeTimeout time.Duration) time.Duration {
	return max(drift.Mul(nodeTimeout, 10), 500*time.Millisecond)
}

// PipelineQueue bounds the commands waiting for one node's senders; batchMax
// bounds one pipeline, and maxSenders the batches in flight on one node.
// Together they bound what a hung node holds.
//
// A node whose batches take farRTT or more to come back is far: a command
// queued behind a batch in flight waits pipelineLinger (long enough for
// concurrent callers to join it), then another sender takes it. On a near
// node commands wait for the batch in flight, which is soon back; that is
// what makes batches deep under load.
const (
	PipelineQueue  = 1024
	batchMax       = 256
	maxSenders     = 8
	farRTT         = 1500 * time.Microsecond
	pipelineLinger = 200 * time.Microsecond
)

// job is one queued command and where its reply goes.
type job struct {
	cmd *redis.Cmd
	// raw, if set, carries the command instead of cmd, and exec sets its
	// reply on cmd (see rawreply.go).
	raw *redis.RawCmd
	key string // the first key, whose order it keeps
	// keys are every key whose order it keeps, key first, where it names
	// more than one (Command.OrderedBy: a multi-key lease's lock keys);
	// nil for a command on key alone, so that the common case costs
	// nothing more.
	keys  []string
	lease string // the lease's value, for withdraw
	// The one-byte fields sit together, so that a job fits in 160 bytes (a
	// malloc size class): a sender allocates its batch when it starts, for
	// a lone caller once per command. TestSizesKeepTheirBounds checks it.
	role Role
	// replicate: the batch's WAIT must acknowledge it for a grant to count;
	// notReplicated is the WAIT's verdict, set before delivery.
	replicate bool
	// guarded: the rider's verdict on the batch decides whether its vote
	// counts; verdict is that verdict, set before delivery.
	guarded bool
	rerun   bool // sent again after NOSCRIPT, in a pipeline of its own
	// deletedFirst: a release whose first run deleted its value, run again
	// after the commands before it (see exec): that run's reply (1, or 2
	// where it also named the next Locker in the key's line), else 0
	deletedFirst  int8
	notReplicated error
	verdict       error
	timeout       time.Duration // the batch carrying it may take this long
	src           string        // a script's source, resent with EVAL after NOSCRIPT; "" for other commands
	to            Receiver
	node          int
}

// deliver hands j's reply, read at received (zero: no reply was read), to
// its receiver.
func (j *job) deliver(received time.Time) {
	if err := j.cmd.Err(); errors.Is(err, context.DeadlineExceeded) {
		// The batch's own context, never the caller's: a node timeout must
		// not look like the caller's deadline.
		j.cmd.SetErr(nodeTimeout(j.timeout, err))
	}
	j.to.Receive(j.node, Reply{Cmd: j.cmd, NotReplicated: j.notReplicated, Verdict: j.verdict, Received: received})
}

// NewPipeline returns the pipeline of client. w is the WAIT that follows
// batches with commands to replicate, rider the rider of batches with
// guarded commands (nil: none), stallAfter how long a batch may be in
// flight before the node counts as no longer answering (0: never; see
// StallAfter), and onTrip, if set, hears of every batch's round trip.
func NewPipeline[R any](client *redis.Client, w *Wait, rider Rider[R], stallAfter time.Duration, onTrip func(RoundTrip)) *Pipeline[R] {
	return &Pipeline[R]{client: client, wait: w, rider: rider, stallAfter: stallAfter, onTrip: onTrip}
}

var _ Link = (*Pipeline[struct{}])(nil)

// Names are the digests the node named for scripts.
func (p *Pipeline[R]) Names() *luascript.Names { return &p.names }

// Submit queues c. Its reply goes to to once its batch is back, or at once
// when the queue refuses it (ErrNodeBusy: the queue is full, or the node
// stopped answering) or s.Skip does.
func (p *Pipeline[R]) Submit(ctx context.Context, c Command, s Send, to Receiver, node int) {
	if s.Skip != nil {
		if err := s.Skip(node); err != nil {
			r := failed(ctx, err)
			r.Uncounted = true
			to.Receive(node, r)
			return
		}
	}
	// A script whose digest this node has not named goes as EVAL
	// (WireFor), and its first use learns the digest (SCRIPT LOAD, in the
	// background, on a pooled connection of its own): that command names
	// no key and is never queued, so order per key, reruns and withdrawal
	// are as for any command; only the wire form of the script's later
	// commands to this node changes, to EVALSHA.
	wire := c.Args
	if c.Script != nil {
		wire = c.WireFor(p.names.Use(ctx, p.client, c.Script.Script, s.Timeout))
	}
	j := job{cmd: redis.NewCmd(ctx, wire...), key: c.Key, lease: c.Lease, role: c.Role, replicate: c.Replicate && p.wait != nil, guarded: c.Guarded && p.rider != nil, timeout: s.Timeout, src: c.source(), to: to, node: node}
	if keys := c.OrderedBy(); len(keys) > 1 {
		j.keys = keys
	}
	if c.ReadsRaw() {
		j.raw = redis.NewRawCmd(ctx, wire...)
	}
	if !p.submit(j) {
		r := failed(ctx, ErrNodeBusy)
		r.Uncounted = true
		to.Receive(node, r)
	}
}

// submit queues j, starting a sender if none is running, or setting the kick
// if the senders are busy. It reports false, queuing nothing, when the queue
// is full or the node stopped answering; but a release whose SET still waits
// in a full queue withdraws it and is answered at once (see withdraw).
func (p *Pipeline[R]) submit(j job) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled() {
		return false // the queue, and any SET of j's lease in it, was failed
	}
	if len(p.queue) >= PipelineQueue {
		if j.role != RoleReleases || !p.withdraw(j.key, j.lease) {
			return false
		}
		j.cmd.SetVal(int64(1)) // the value never reached the node: released
		j.deliver(time.Time{})
		return true
	}
	p.queue = append(p.queue, j)
	switch {
	case p.senders == 0:
		p.startSender()
	case p.senders < maxSenders && !p.kicking && p.rtt >= farRTT:
		if p.kick == nil {
			p.kick = time.AfterFunc(pipelineLinger, p.kicked)
		} else {
			p.kick.Reset(pipelineLinger)
		}
		p.kicking = true
	}
	return true
}

// startSender starts a sender goroutine. p.mu is held.
func (p *Pipeline[R]) startSender() {
	p.senders++
	p.lastID++
	go p.send(p.lastID)
}

// kicked runs pipelineLinger after a command was queued behind busy senders:
// if commands are still waiting that a new sender could take, it starts one.
// It asks as take would (a sender that would take nothing would only end),
// for a sender whose id no sender has.
func (p *Pipeline[R]) kicked() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kicking = false
	if p.senders >= maxSenders || p.stalled() {
		return
	}
	var kept map[string]bool // as in take
	for i := range p.queue {
		j := &p.queue[i]
		if !p.heldElsewhere(0, j) && !j.names(kept) {
			p.startSender()
			return
		}
		if j.keys != nil {
			kept = j.addTo(kept)
		}
	}
}

// withdraw reports whether the SET of the lease with value on key is queued,
// unsent: if so, nothing of the lease reached the node (order per key means
// nothing later on the key was sent either), and its release need not be;
// then it fails, unsent, every queued command of the lease on key (SET,
// fencing phase 2, extensions). Their rounds were decided before the
// release began. p.mu is held.
//
// key is a job's first key. That is enough for a multi-key lease too: all
// its commands on a node name the same first key and carry the same value,
// and each is ordered against that key, so that what holds for a
// single-key lease holds for it.
func (p *Pipeline[R]) withdraw(key, value string) (set bool) {
	for _, j := range p.queue {
		if j.key == key && j.lease == value && j.role == RoleSets {
			set = true
		}
	}
	if !set {
		return false
	}
	// The release is taken as done: every queued command of the lease on
	// key goes with the SET (an extension that heals would set the key
	// again after it; see the invariant at pipeline).
	kept := p.queue[:0]
	for _, j := range p.queue {
		if j.key != key || j.lease != value {
			kept = append(kept, j)
			continue
		}
		j.cmd.SetErr(ErrWithdrawn)
		j.deliver(time.Time{}) // never blocks
	}
	clear(p.queue[len(kept):])
	p.queue = kept
	return true
}

// stalled reports whether a batch has been in flight for stallAfter. If so,
// it fails the queued commands: they were never sent, and sending them once
// the node wakes up would only replay stale work. p.mu is held.
func (p *Pipeline[R]) stalled() bool {
	if p.stallAfter <= 0 || len(p.sending) == 0 {
		return false
	}
	now := time.Now()
	for _, sent := range p.sending {
		if now.Sub(sent) < p.stallAfter {
			continue
		}
		for i := range p.queue {
			j := &p.queue[i]
			j.cmd.SetErr(ErrNodeBusy)
			j.deliver(time.Time{}) // never blocks
		}
		clear(p.queue)
		p.queue = p.queue[:0]
		return true
	}
	return false
}
