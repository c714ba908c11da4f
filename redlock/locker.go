package redlock

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock/internal/notice"
	"github.com/redlock/redlock/redlock/internal/waitq"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// A Locker acquires leases on a fixed set of independent Redis nodes. It is
// safe for concurrent use.
type Locker struct {
	nodes    []node
	opts     Options
	bound    drift.Bound
	inflight tracker      // every call in flight, for Drain
	releases calls        // releases in flight, per key, which acquisitions wait for (see calls)
	setting  calls        // calls in flight that may set a lease's value, per value, which its releases wait for
	turns    waitq.Queues // Lock calls waiting for each key, in order
	notices  *notice.Hub  // release notices for the keys Lock waits for (nil: Options.NoWakeUps)
	id       string       // this Locker in the keys' lines of waiting Lockers (see joinLine)
	servers  []string     // the nodes' identities, sorted: what a Handle is bound to
	durable  durableCheck
	// pipelined: some node has a pipeline, which shares a round's command
	// in its wire form (wire.Command.Bind)
	pipelined bool
}

// New returns a Locker over nodes. Each node must be a separate Redis master
// (see Node); opts may be nil for the defaults.
func New(nodes []Node, opts *Options) (*Locker, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	wait := wire.NewWait(o.WaitReplicas, o.WaitAOF, o.NodeTimeout)
	ns, err := newNodes(nodes, &o, wait)
	if err != nil {
		return nil, err
	}
	if o.Fencing && len(ns) > maxFencingNodes {
		return nil, fmt.Errorf("redlock: %d nodes: fencing supports at most %d", len(ns), maxFencingNodes)
	}
	if o.RequireDurable && !o.Fencing {
		return nil, errors.New("redlock: Options.RequireDurable needs Options.Fencing")
	}
	if wait != nil {
		for _, n := range ns {
			if err := checkWaitable(n); err != nil {
				return nil, err
			}
		}
	}
	l := &Locker{nodes: ns, opts: o, bound: o.bound(), id: newValue("")}
	for _, n := range ns {
		l.pipelined = l.pipelined || n.pipelined
		l.servers = append(l.servers, n.identity)
	}
	slices.Sort(l.servers)
	if !o.NoWakeUps {
		l.notices = newNotices(ns, &l.turns, o.NodeTimeout, l.id)
		// A client that unlocks and locks again within a poll, after its
		// release named another Locker, waits for its turn (waitq.Join).
		l.turns.PassedFor = drift.Add(o.RetryDelay, o.RetryJitter)
	}
	return l, nil
}

// TryLock makes one attempt to acquire key for ttl. It returns the lease, or
// an error that tells contention (errors.Is(err, ErrNotObtained)) from
// unavailable nodes (a *QuorumError without it) and from the caller's context
// (errors.Is(err, ctx.Err())).
//
// ttl is rounded down to whole milliseconds, Redis's resolution, and must
// exceed its drift allowance. A failed attempt is released on every node
// before TryLock returns, or, for nodes that had not answered, as soon as
// they do.
func (l *Locker) TryLock(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := l.made("TryLock"); err != nil {
		return nil, err
	}
	req, err := l.request(ctx, "acquire", key, ttl)
	if err != nil {
		return nil, err
	}
	return l.attempt(ctx, req, 1)
}

// Lock acquires key for ttl, trying again until it wins or ctx ends. Errors
// that no retry can cure (bad arguments) are returned at once. When ctx
// ends, the error matches ctx.Err() and carries the last attempt that the
// nodes decided (errors.Is(err, ErrNotObtained) under contention).
//
// How it waits: this Locker's Lock calls for a key queue in arrival order,
// and only the head tries; a release by this Locker wakes it at once, a
// release elsewhere when its notices come (unless Options.NoWakeUps), and
// otherwise it polls after a random delay in [RetryDelay,
// RetryDelay+RetryJitter), longer while its attempts split the nodes with
// other contenders. Across processes, the key's line on the nodes names
// whose turn a release is, and a Lock just after this Locker's release
// named another waits a few round trips for it to try. An attempt that
// finds another holder's value stops waiting for the slowest nodes soon
// (see docs/performance.md, "Waiting for a busy lock"), unlike TryLock's, which waits
// for every node.
//
// Lock waits as long as ctx allows: a context without a deadline or
// cancellation is consent to wait until the lock is free, however long that
// is. Give it a deadline to bound the wait.
func (l *Locker) Lock(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := l.made("Lock"); err != nil {
		return nil, err
	}
	req, err := l.request(ctx, "acquire", key, ttl)
	if err != nil {
		return nil, err
	}
	// In the key's queue before the first attempt, so that a release after
	// an attempt that found the key taken wakes this call (see package waitq).
	w, first, held, passed := l.turns.Join(key)
	won := false
	// Listening for releases elsewhere (other processes) while the key is
	// contended: at once behind other waiters, else after a failed attempt.
	var listen *notice.Listener
	if !first {
		listen = l.notices.Listen(key)
	}
	var joined time.Time // when this call last joined the key's line (zero: not in it)
	// inLine: this call joined the key's line. A release that named this
	// Locker took its place on the nodes that named it, not always on
	// every node (lines differ where joins raced): a call that gives up
	// leaves the line on every node whatever turns it was named.
	inLine := false
	defer func() {
		l.turns.Leave(key, w, won)
		listen.Stop()
		if !won && inLine && l.turns.Waiting(key) == 0 {
			l.leaveLine(key) // no waiter here is left to take a turn named for this Locker
		}
	}()
	var tries retries
	heard := false // listen was confirmed (or waited for) before an attempt
	hear := func() {
		if listen != nil && !heard {
			// What follows (an attempt, a join) goes after the
			// subscription is confirmed, so that a release after it is
			// heard (see package notice).
			heard = true
			listen.Ready(ctx, l.needHeard(), l.opts.NodeTimeout)
		}
	}
	join := func() {
		if listen == nil {
			listen = l.notices.Listen(key)
		}
		if listen != nil {
			hear()
			l.joinLine(key)
			joined, inLine = l.opts.Clock.Now(), true
		}
	}
	req.yield = true // Lock tries again: its attempts stop waiting soon under contention (yielding)
	ready := first && !held && !passed
	if passed {
		join() // the turn went to another Locker: wait in the line for this one's
	}
	for {
		if !ready {
			poll := drift.Add(l.retryWait(), l.splitBackoff(tries.split))
			if passed {
				// The first wait after a turn passed to another Locker:
				// as long as that one takes to try (see handOffWait).
				poll, passed = l.handOffWait(poll), false
			}
			turn := l.awaitTurn(ctx, key, w, poll, join)
			if turn == turnEnded {
				break // ctx ended
			}
			if turn == turnNamed {
				joined = time.Time{} // the release took this Locker's place in the line
			}
		}
		ready = false
		hear()
		var lease *Lease
		lease, err = l.attempt(ctx, req, tries.attempts+1)
		if err == nil {
			won = true
			return lease, nil
		}
		if tries.lost(ctx, &req, err) {
			if errors.Is(err, ErrNotDurable) {
				return nil, err
			}
			break
		}
		switch {
		case listen == nil:
			// The first attempt found the key taken: listen, and try again
			// once listening, so that no release after that try is missed.
			if f := l.opts.unsafe.BeforeListen; f != nil {
				f() // a test's point to act (internal/unsafelocker)
			}
			if listen = l.notices.Listen(key); listen != nil && tries.split == 0 && !l.opts.unsafe.NoRetryAfterListen {
				ready = true
			}
		case joined.IsZero() || l.opts.Clock.Now().Sub(joined) > lineTTL/3:
			// Listening, and the key is taken: wait in the key's line, so
			// that a release names this Locker when its turn comes.
			join()
		}
	}
	if tries.decided == nil && err == nil {
		err = fmt.Errorf("redlock: lock %q: %w", key, contextError(ctx))
		return nil, err // ctx ended before the first attempt
	}
	return nil, tries.gaveUp(ctx, strconv.Quote(key), err)
}

// retries is what a Lock's attempts that did not win tell the next: how
// many there were, the last one the nodes (not ctx) decided, and how many
// in a row split the nodes (some granted, no majority).
type retries struct {
	attempts, split int
	decided         error
}

// lost records an attempt of req that failed with err, and reports
// whether to stop trying: an error no retry cures (ErrNotDurable: the
// nodes' settings), or ctx's end. It counts the attempts that stopped
// waiting for slow nodes in a row into req.yielded (see yielding).
func (r *retries) lost(ctx context.Context, req *request, err error) (stop bool) {
	r.attempts++
	if errors.Is(err, ErrNotDurable) {
		return true
	}
	if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		r.decided = err
	}
	if ctx.Err() != nil {
		return true
	}
	if errors.Is(err, errNotWaitedFor) {
		req.yielded++ // the next attempt waits four times as long (see yielding)
	} else {
		req.yielded = 0
	}
	if q, ok := err.(*QuorumError); ok && q.Granted > 0 {
		r.split++
	} else {
		r.split = 0
	}
	return false
}

// gaveUp is the error of a Lock of name whose ctx ended: with the last
// attempt the nodes decided, or else last, ctx's own end as the last
// attempt saw it.
func (r *retries) gaveUp(ctx context.Context, name string, last error) error {
	if r.decided == nil {
		return last // ctx ended during the first attempt
	}
	return fmt.Errorf("redlock: lock %s: gave up after %d attempts: %w; last decided attempt: %w", name, r.attempts, contextError(ctx), r.decided)
}

// turn is what awaitTurn saw: a turn to try (named for this Locker by a
// release elsewhere, or not), or ctx's end.
type turn uint8

const (
	turnEnded turn = iota
	turnTry
	turnNamed
)

// awaitTurn waits until w, in key's queue, may send its next attempt: once
// it is the head, at a release of the key by this Locker, at a release
// elsewhere that named this Locker's turn or no one's, or after poll (for
// releases no notice told of, and leases that expire unreleased). A waiter
// behind the head sends nothing and only waits to move up. A release here
// that named another Locker's turn calls passed (which joins the key's
// line), and the wait goes on. It reports turnEnded when ctx ends first.
func (l *Locker) awaitTurn(ctx context.Context, key string, w *waitq.Waiter, poll time.Duration, passed func()) turn {
	var timer *time.Timer // the poll, counted from when w is the head
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if first, _ := l.turns.Head(key, w); !first {
			select {
			case <-w.Wake: // moved up, perhaps to the head
				// One wake-up may stand for two (the head left, and the
				// key was released) and a release may have gone to a head
				// that left without taking it: a new head that finds the
				// key not held here tries at once.
				if first, held := l.turns.Head(key, w); first && !held {
					w.Woken()
					return turnTry
				}
				continue
			case <-ctx.Done():
				return turnEnded
			}
		}
		if timer == nil {
			timer = time.NewTimer(poll)
		}
		select {
		case <-w.Wake:
			why := w.Woken()
			if why&waitq.Passed != 0 {
				passed()
			}
			_, held := l.turns.Head(key, w)
			switch {
			case why&waitq.NamedThis != 0:
				return turnNamed
			case why&waitq.NamedSome != 0:
				// Named by some nodes only: others named elsewhere try
				// too; stagger, as below. The place in those nodes' lines
				// is gone: turnNamed, so that a loss joins again.
				if !l.stagger(ctx) {
					return turnEnded
				}
				return turnNamed
			case held:
				// moved up behind a lease of this Locker: wait for its release
			case why&waitq.ReleasedHere != 0 || why == 0:
				return turnTry // released here, or the head before left without a lease
			case why&waitq.NamedNobody != 0:
				// A release elsewhere that named no Locker: every other
				// Locker's head heard it too. Attempts sent at one moment
				// split the nodes between them and none wins; a random
				// stagger of up to two round trips lets the first take
				// every node.
				if !l.stagger(ctx) {
					return turnEnded
				}
				return turnTry
			}
			// passed: the turn is another Locker's; wait for this one's
		case <-timer.C:
			return turnTry
		case <-ctx.Done():
			return turnEnded
		}
	}
}

// splitBackoff is the extra wait after split attempts lost in a row, each
// of which some nodes granted but no majority: contenders that each won a
// minority (a slow node holding every attempt back, say) fall out of step
// instead of taking turns at keeping each other out. It grows with split,
// as a random delay up to RetryJitter (or RetryDelay) times 2^split,
// capped at 2^5.
func (l *Locker) splitBackoff(split int) time.Duration {
	if split == 0 || l.opts.unsafe.NoSplitBackoff { // the latter: a test's control
		return 0
	}
	unit := max(l.opts.RetryJitter, l.opts.RetryDelay)
	if unit <= 0 {
		return 0
	}
	return mathrand.N(drift.Mul(unit, 1<<min(split, 5)))
}

// retryWait is a random delay in [RetryDelay, RetryDelay+RetryJitter): how
// long Lock waits between attempts, and Do after a failed extension.
func (l *Locker) retryWait() time.Duration {
	wait := l.opts.RetryDelay
	if l.opts.RetryJitter > 0 {
		wait = drift.Add(wait, mathrand.N(l.opts.RetryJitter))
	}
	return wait
}

// Drain waits until every call this Locker still has in flight has returned:
// replies from slow nodes, and the releases that follow late grants. Call it
// before the process exits, so that a late grant is not left to expire on its
// own. It returns ctx's error if ctx ends first.
func (l *Locker) Drain(ctx context.Context) error {
	if err := l.made("Drain"); err != nil {
		return err
	}
	if ctx == nil {
		return errors.New("redlock: Drain: nil context")
	}
	return l.inflight.wait(ctx)
}

// request is a validated acquire or extend request.
type request struct {
	// yield: a Lock's attempt, which stops waiting for the nodes still to
	// answer soon after one of them refused (see yielding); yielded, how
	// many of the Lock's attempts in a row did so before this one
	yield   bool
	yielded int
	key     string
	counter string // the fencing counter's key, with Options.Fencing
	record  string // and its token record's (tokenRecordKey)
	// multi: a multi-key lease's keys, sorted and distinct (key is the
	// first); counters and records, with Options.Fencing, their fencing
	// counters and token records
	multi    []string
	counters []string
	records  []string
	granted  time.Duration // the lease the server grants: ttl rounded down to ms
	ms       int64         // granted in milliseconds, as sent in PX
	budget   time.Duration // granted minus the drift allowance: the most validity possible
}

func (l *Locker) request(ctx context.Context, op, key string, ttl time.Duration) (request, error) {
	if err := checkKey(ctx, op, key); err != nil {
		return request{}, err
	}
	if err := l.checkTTL(op, key, nil, ttl); err != nil {
		return request{}, err
	}
	if ctx.Err() != nil {
		return request{}, fmt.Errorf("redlock: %s %q: %w", op, key, contextError(ctx))
	}
	granted, ms, _ := drift.Granted(ttl)
	req := request{key: key, granted: granted, ms: ms, budget: granted - l.bound.Of(granted)}
	if l.opts.Fencing && op == "acquire" {
		var err error
		if req.counter, err = counterKey(key); err != nil {
			return request{}, err
		}
		req.record, _ = tokenRecordKey(key) // as the counter's: the key takes a hash tag
	}
	return req, nil
}

// checkTTL validates ttl for op on key (or on the keys of a multi-key
// lease, where multi is set): positive, within MaxTTL, longer than its
// drift allowance. The lock is named only in an error: not on every call.
func (l *Locker) checkTTL(op, key string, multi []string, ttl time.Duration) error {
	var problem error
	switch {
	case ttl <= 0:
		problem = fmt.Errorf("ttl %v must be positive", ttl)
	case ttl > l.opts.MaxTTL:
		problem = fmt.Errorf("ttl %v is longer than Options.MaxTTL (%v)", ttl, l.opts.MaxTTL)
	default:
		problem = l.bound.Check(ttl)
	}
	if problem == nil {
		return nil
	}
	return fmt.Errorf("redlock: %s %s: %w", op, request{key: key, multi: multi}.describe(), problem)
}

// attempt is one acquisition, Lock's n-th: SET NX PX GET on every node,
// decided early.
func (l *Locker) attempt(ctx context.Context, req request, n int) (*Lease, error) {
	start := l.opts.Clock.Now() // before the first send
	if (req.counter != "" || req.counters != nil) && l.opts.RequireDurable {
		if err := l.requireDurable(ctx); err != nil {
			if l.observed() {
				l.emit(Event{Op: OpAcquire, Key: req.key, Attempt: n, Duration: l.opts.Clock.Now().Sub(start), Err: err})
			}
			return nil, err
		}
		start = l.opts.Clock.Now()
	}
	value := newValue(l.opts.Owner)
	earlier := l.earlierReleases(req)
	c, read, counters := l.acquisition(req, value) // counters: phase 1's fencing counters, per node and key, filled in by the replies
	timing := l.timing()
	decide, contended, stop := l.yielding(ctx, req, start)
	round := l.fanOut(ctx, fan{earlier: earlier, timeout: l.opts.NodeTimeout, value: value, counters: counters, timing: timing, contended: contended}, c, read)
	// Waiting past the budget is pointless: no validity would be left.
	wait := min(l.opts.NodeTimeout, req.budget)
	tally := round.DecideWithin(decide, wait, l.stallGrace(wait, req.budget), granted)
	stop()
	until := start.Add(req.budget - l.fastClocks(tally, req.granted))
	var token uint64
	var tokens []uint64 // a multi-key lease's, one per key
	var err error
	phase2 := false
	if tally.Won && counters != nil {
		token, tokens, phase2, err = l.fence(ctx, req, value, c, round, tally, counters, until, timing)
	}
	now := l.opts.Clock.Now()
	if l.opts.unsafe.ValidityFromReply {
		until = now.Add(req.granted) // the simulator's control: see internal/unsafelocker
	}
	if err == nil && tally.Won && until.After(now) {
		lease := &Lease{locker: l, key: req.key, multi: req.multi, value: value, token: token, tokens: tokens, acquiredAt: start, acquired: round, heldBy: round, holders: round, ttl: req.granted, span: req.granted, until: until}
		if timing != nil {
			e := Event{Op: OpAcquire, Key: req.key, Attempt: n, Duration: now.Sub(start), Token: token, Validity: until.Sub(now), Nodes: l.resultsInto(timing.eventNodes(len(tally.Votes)), tally, timing, nil), Stalled: tally.Late}
			if counters != nil {
				e.Detail = fencedIn(phase2)
			}
			l.emit(e)
			l.reportNodes(OpAcquire, req.key, round, tally, true)
		}
		return lease, nil
	}

	// Release everywhere: at once where the SET has returned, and on the
	// other nodes as soon as it does. Wait for the nodes that granted.
	var releaseTiming *latencies
	if timing != nil {
		releaseTiming = l.timing()
	}
	skip := refusedIn(round)
	if l.opts.unsafe.NoReleaseOnFailure {
		skip = func(int) error { return errNotReleased } // the simulator's control: see internal/unsafelocker
	}
	released := l.release(ctx, req.key, req.multi, value, round, req.granted, releaseTiming, skip, nil)
	if timing != nil {
		// Before waiting for the granted nodes: the release's report
		// must be counted in flight (Drain) before this attempt returns.
		l.watchRelease(req.key, n, start, round, tally, released, releaseTiming)
	}
	l.waitGranted(released, tally)
	if err == nil {
		err = l.roundError(ctx, "acquire", c, tally, timing)
	}
	if timing != nil {
		l.emit(Event{Op: OpAcquire, Key: req.key, Attempt: n, Duration: l.opts.Clock.Now().Sub(start), Err: err, Nodes: l.nodeResultsOf(err, tally, timing), Stalled: tally.Late})
		l.reportNodes(OpAcquire, req.key, round, tally, true)
	}
	return nil, err
}

// fastClocks is how much earlier than the drift bound allows the lease's
// keys may expire on the nodes that granted in tally: the most that any of
// their clocks is measured to run faster than the bound (drift.Estimator's
// Excess), times the TTL. Validity shrinks by it. Zero without the node
// guard, and for clocks not measured yet.
func (l *Locker) fastClocks(tally quorum.Tally[Outcome], ttl time.Duration) time.Duration {
	excess := 0.0
	for i, v := range tally.Votes {
		if g := l.nodes[i].guard; v.Accepted && g != nil {
			excess = max(excess, g.Excess())
		}
	}
	return time.Duration(float64(ttl) * excess)
}

// waitGranted waits, for at most NodeTimeout, for round's calls on the nodes
// that granted in tally: they hold the value and just answered, so their
// release is quick, and other clients need not find it there. Releases on
// the other nodes go on in the background.
func (l *Locker) waitGranted(round *quorum.Round[Outcome], tally quorum.Tally[Outcome]) {
	timer := time.NewTimer(l.opts.NodeTimeout)
	defer timer.Stop()
	for i, v := range tally.Votes {
		if !v.Accepted {
			continue
		}
		select {
		case <-round.Settled(i):
		case <-timer.C:
			return
		}
	}
}

// release sends the compare-and-delete of key's value to every node, each
// after that node's call in acquired (see fan.after). It is cleanup, so it
// runs detached from the caller's context (a caller who gave up still cleans
// up), and each call may take up to ttl, not just NodeTimeout: a release
// that is slow (EVALSHA answered NOSCRIPT late, and EVAL must follow) is
// still worth sending until the key would have expired anyway. skip, if
// set, says which nodes are not sent it (see refusedIn).
//
// notify makes each node that deletes the value publish it on the key's
// release channel (package notice), to wake waiters elsewhere: a lease's
// Unlock does; a failed attempt's release does not, since the key was not
// theirs to wait for (waking every other Locker's head at each lost
// attempt would make a storm of attempts under contention).
//
// passed is nil for a failed attempt's release; for a lease's Unlock it
// counts the nodes whose release named another Locker's turn: the script
// then publishes the release to the key's waiters (see package notice).
func (l *Locker) release(ctx context.Context, key string, multi []string, value string, acquired *quorum.Round[Outcome], ttl time.Duration, timing *latencies, skip func(int) error, passed *atomic.Int32) *quorum.Round[Outcome] {
	f := fan{after: acquired, skip: skip, timeout: max(ttl, l.opts.NodeTimeout), release: key, releaseAll: multi, timing: timing, passed: passed}
	c, read := l.releaseCommand(key, multi, value, passed != nil)
	return l.fanOut(context.WithoutCancel(ctx), f, c.Of(value, wire.RoleReleases), read)
}

// unlockCommand is a lease's release: it publishes to the key's waiters
// (ARGV[2], notifyArg) on its release channel (ARGV[4]) and names the next
// Locker in the key's line (KEYS[2]), other than this one (ARGV[3]). A key
// that cannot carry a hash tag has neither: its release is a plain one.
func (l *Locker) unlockCommand(key, value string) wire.Command {
	line, ok := notice.Line(key)
	channel, _ := notice.Channel(key) // as the line: the key takes a hash tag
	if !ok {
		return wire.ScriptCommand(releaseScript, []string{key}, value)
	}
	return wire.ScriptCommand(releaseScript, []string{key, line}, value, notifyArg, l.id, channel)
}

// notifyArg is the release script's ARGV[2] that asks it to publish.
const notifyArg = "notify"

func granted(o Outcome, err error) bool { return err == nil && o == Granted }

// refusedIn is the release skip of a failed attempt: a node whose SET
// has already come back refused (another value on the key) holds nothing of
// the attempt, and is not sent the release (errNothingToRelease). Its reply
// is final (a command runs again only before its reply is delivered), and a
// refused SET NX writes nothing. Under contention most attempts are refused
// everywhere, so this halves their commands. A node whose reply is still
// outstanding, or failed, or granted, gets the release. (A lease's Unlock
// skips nothing: an extension may have healed its key since on a node that
// refused the acquisition.)
func refusedIn(acquired *quorum.Round[Outcome]) func(int) error {
	return func(i int) error {
		select {
		case <-acquired.Settled(i):
			if o, err := acquired.Result(i); err == nil && o == Taken {
				return errNothingToRelease
			}
		default:
		}
		return nil
	}
}

// roundError describes a round that did not succeed: see QuorumError.
// c is the round's command: a node's ACL refusal is explained in its terms.
// timing, where the round was timed, gives each node's latency.
func (l *Locker) roundError(ctx context.Context, op string, c wire.Command, tally quorum.Tally[Outcome], timing *latencies) *QuorumError {
	e := &QuorumError{Op: op, Key: c.Key, Keys: slices.Clone(c.OrderedBy()), Need: tally.Need, Granted: tally.Accepted, Nodes: l.results(tally, timing, func(err error) error { return explainDenied(c, err) })}
	taken, missing, notWaited := 0, 0, 0
	for _, n := range e.Nodes {
		switch n.Outcome {
		case Taken:
			taken++
		case Missing, Revoked:
			missing++
		}
		if errors.Is(n.Err, errNotWaitedFor) {
			notWaited++
		}
	}
	l.lastKnown(e, c.Key)
	e.remedy = l.trustRemedy(e.Nodes)
	cannotWin := len(tally.Votes) - tally.Need // more refusals than this decide
	switch {                                   // what the nodes answered outranks a context that ended meanwhile
	case op == "acquire" && (taken > cannotWin || (taken > 0 && taken+notWaited > cannotWin)):
		// Contention decided it, whether by the nodes' refusals alone or
		// by a Lock's attempt that stopped waiting after one (yielding).
		e.Cause = ErrNotObtained
	case op != "acquire" && taken+missing > cannotWin:
		e.Cause = ErrNotHeld
	case op != "unlock" && ctx.Err() != nil:
		e.Cause = contextError(ctx)
	case tally.Won:
		e.Cause = errValidityUsedUp
	}
	return e
}

// contextError is ctx's error, with its cause where the cause differs, so
// that errors.Is matches both.
func contextError(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return err
	}
	return fmt.Errorf("%w: %w", err, cause)
}

// yielding returns the context a Lock's attempt decides under (req.yield):
// once a node has refused because another value holds the key, the
// attempt waits for the nodes still to answer only as long again as the
// refusal took (at least minYield), four times as long for each attempt of
// this Lock that yielded before (req.yielded), then counts them as not answered and
// loses (as contention: ErrNotObtained). Why: two contenders that split
// the fast nodes between them would otherwise each hold their share while
// a slow node answers (a WAIT that runs to its timeout, say), keeping
// every other attempt out, and do it again on their next tries: a
// livelock. Lock tries again after its backoff, which grows while
// attempts split. Why longer: a refusal may be no contender's but a
// grant left behind on a minority (a crashed client's, an Unlock that
// missed the node), with the slow node the only way to a majority: the
// Lock's later attempts wait long enough for it. (Waiting fully whenever
// the same value refused two attempts in a row was tried: one attempt
// that waited made its value repeat for the others, which then waited
// too, and the livelock came back.) A TryLock, which has no next try,
// waits for every node as before. contended goes to the attempt's
// ballot; stop releases what yielding set up, once the decision is made.
func (l *Locker) yielding(ctx context.Context, req request, start time.Time) (decide context.Context, contended func(), stop func()) {
	if !req.yield {
		return ctx, nil, func() {}
	}
	decide, cancel := context.WithCancelCause(ctx)
	var once sync.Once
	var timer atomic.Pointer[time.Timer]
	contended = func() {
		once.Do(func() {
			grace := drift.Mul(max(drift.Mul(l.opts.Clock.Now().Sub(start), 2), minYield), 1<<min(2*req.yielded, 20))
			timer.Store(time.AfterFunc(min(grace, l.opts.NodeTimeout), func() { cancel(errNotWaitedFor) }))
		})
	}
	stop = func() {
		once.Do(func() {}) // no timer after the decision
		if t := timer.Load(); t != nil {
			t.Stop()
		}
		cancel(nil)
	}
	return decide, contended, stop
}

// minYield is the least a Lock's attempt waits for the nodes still to
// answer after one refused (see yielding).
const minYield = 2 * time.Millisecond
