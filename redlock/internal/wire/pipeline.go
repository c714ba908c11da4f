package wire

import (
	"context"
	"errors"
	"runtime"
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

// send sends batches until no queued command is left for it.
func (p *Pipeline[R]) send(id int64) {
	var batch []job
	concurrent := false // the last batch carried more than one command
	ended := false      // take counted this sender out
	defer func() {
		if !ended {
			p.abandon(id, batch)
		}
	}()
	for {
		batch = p.take(id, batch[:0])
		if len(batch) == 0 {
			ended = true
			return
		}
		if concurrent && len(batch) < batchMax {
			// Let callers that are about to queue do so: under load one
			// yield deepens the batch. A lone caller skips it, so that its
			// command goes out at once.
			runtime.Gosched()
			batch = p.take(id, batch)
		}
		concurrent = len(batch) > 1
		p.exec(batch)
		p.unhold(id, batch)
		clear(batch) // drop the finished commands and rounds
	}
}

// abandon is the end of sender id that did not end in take: a hook ended
// its goroutine (runtime.Goexit) while batch was in flight, after exec
// answered every call of it (see exec). It lets go of the batch's keys,
// counts the sender out, and starts another for what is queued, so that
// nothing waits on a sender that is gone.
func (p *Pipeline[R]) abandon(id int64, batch []job) {
	p.unhold(id, batch)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.senders--
	if len(p.queue) > 0 && p.senders < maxSenders && !p.stalled() {
		p.startSender()
	}
}

// take moves to batch, in order and up to batchMax, the queued commands none
// of whose keys another sender holds, and holds their keys for sender id.
// When it takes nothing the sender ends: it returns nil and counts the
// sender out.
//
// A command left in the queue must keep every later one on its keys behind
// it. A command on one key is left when its key is held by another sender,
// or is in kept (below), and either leaves every later command on that key
// too; once the batch is full, everything after is left. But a multi-key
// command may be left for one of its keys while the others are free: so
// the keys of those left are gathered in kept, a set made only when one
// is, and a later command naming any of them is left too.
func (p *Pipeline[R]) take(id int64, batch []job) []job {
	p.mu.Lock()
	defer p.mu.Unlock()
	queue := p.queue[:0]
	var kept map[string]bool // the keys of multi-key commands left in the queue
	for _, j := range p.queue {
		if len(batch) == batchMax || p.heldElsewhere(id, &j) || j.names(kept) {
			queue = append(queue, j)
			if j.keys != nil && len(batch) < batchMax {
				kept = j.addTo(kept)
			}
			continue
		}
		if p.busy == nil {
			p.busy = make(map[string]int64)
		}
		if j.keys == nil {
			p.busy[j.key] = id
		} else {
			for _, k := range j.keys {
				p.busy[k] = id
			}
		}
		batch = append(batch, j)
	}
	clear(p.queue[len(queue):])
	p.queue = queue
	if len(batch) == 0 {
		p.senders--
		return nil
	}
	if p.sending == nil {
		p.sending = make(map[int64]time.Time)
	}
	p.sending[id] = time.Now()
	return batch
}

// unhold lets go of the keys sender id held for batch, and counts the
// batch's round trip (from when take stamped it) into p.rtt.
func (p *Pipeline[R]) unhold(id int64, batch []job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rtt += (time.Since(p.sending[id]) - p.rtt) / 8
	delete(p.sending, id)
	for i := range batch {
		if j := &batch[i]; j.keys == nil {
			p.unholdKey(id, j.key)
		} else {
			for _, k := range j.keys {
				p.unholdKey(id, k)
			}
		}
	}
}

// unholdKey lets go of key if sender id holds it. p.mu is held.
func (p *Pipeline[R]) unholdKey(id int64, key string) {
	if p.busy[key] == id {
		delete(p.busy, key)
	}
}

// heldElsewhere reports whether a sender other than id holds a key whose
// order j keeps. p.mu is held.
func (p *Pipeline[R]) heldElsewhere(id int64, j *job) bool {
	if j.keys == nil {
		owner, held := p.busy[j.key]
		return held && owner != id
	}
	for _, k := range j.keys {
		if owner, held := p.busy[k]; held && owner != id {
			return true
		}
	}
	return false
}

// names reports whether set holds a key whose order j keeps.
func (j *job) names(set map[string]bool) bool {
	if j.keys == nil {
		return set[j.key]
	}
	for _, k := range j.keys {
		if set[k] {
			return true
		}
	}
	return false
}

// addTo adds to set, made if nil, every key whose order j keeps, and
// returns it.
func (j *job) addTo(set map[string]bool) map[string]bool {
	if set == nil {
		set = make(map[string]bool, max(len(j.keys), 1))
	}
	if j.keys == nil {
		set[j.key] = true
	}
	for _, k := range j.keys {
		set[k] = true
	}
	return set
}

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
