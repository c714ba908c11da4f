package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock/internal/wire"
)

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
	// counters and token records. One key keeps its names in key, counter
	// and record rather than in one-element slices: a slice per request
	// would cost every TryLock an allocation (the Lease holds its keys in
	// an array of its own for the same reason: Lease.hold).
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

// attemptRound is one acquisition attempt as its round was decided: what
// fencing, the lease or the release on failure, and the attempt's events
// are made from.
type attemptRound struct {
	req      request
	n        int       // the Lock's attempt number (1 for TryLock)
	value    string    // the lease's value, new for each attempt
	start    time.Time // before the first send
	cmd      wire.Command
	round    *quorum.Round[Outcome]
	tally    quorum.Tally[Outcome]
	counters []uint64   // phase 1's fencing counters, per node and key, filled in by the replies (nil: unfenced)
	timing   *latencies // nil: not observed
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
	a := attemptRound{req: req, n: n, value: newValue(l.opts.Owner), start: start, timing: l.timing()}
	earlier := l.earlierReleases(req)
	var read reader
	a.cmd, read, a.counters = l.acquisition(req, a.value)
	decide, contended, stop := l.yielding(ctx, req, start)
	a.round = l.fanOut(ctx, fan{earlier: earlier, timeout: l.opts.NodeTimeout, value: a.value, counters: a.counters, timing: a.timing, contended: contended}, a.cmd, read)
	// Waiting past the budget is pointless: no validity would be left.
	wait := min(l.opts.NodeTimeout, req.budget)
	a.tally = a.round.DecideWithin(decide, wait, l.stallGrace(wait, req.budget), granted)
	stop()
	until := start.Add(req.budget - l.fastClocks(a.tally, req.granted))
	var f fencedTokens
	var err error
	if a.tally.Won && a.counters != nil {
		f, err = l.fence(ctx, &a, until)
	}
	now := l.opts.Clock.Now()
	if l.opts.unsafe.ValidityFromReply {
		until = now.Add(req.granted) // the simulator's control: see internal/unsafelocker
	}
	if err == nil && a.tally.Won && until.After(now) {
		return l.won(&a, f, until, now), nil
	}
	return nil, l.failed(ctx, &a, err)
}

// won makes the lease of a won attempt, valid until until (now is the
// moment it was judged so), and reports it.
func (l *Locker) won(a *attemptRound, f fencedTokens, until, now time.Time) *Lease {
	req, round, tally := a.req, a.round, a.tally
	lease := &Lease{locker: l, value: a.value, acquiredAt: a.start, acquired: round, heldBy: round, holders: round, ttl: req.granted, span: req.granted, until: until}
	lease.hold(req.key, req.multi, a.counters != nil, f.token, f.tokens)
	if a.timing != nil {
		e := Event{Op: OpAcquire, Key: req.key, Attempt: a.n, Duration: now.Sub(a.start), Token: f.token, Validity: until.Sub(now), Nodes: l.resultsInto(a.timing.eventNodes(len(tally.Votes)), tally, a.timing, nil), Stalled: tally.Late}
		if a.counters != nil {
			e.Detail = fencedIn(f.phase2)
		}
		l.emit(e)
		l.reportNodes(OpAcquire, req.key, round, tally, true)
	}
	return lease
}

// failed releases a failed attempt everywhere: at once where the SET has
// returned, and on the other nodes as soon as it does; it waits for the
// nodes that granted, reports the attempt, and returns its error (err,
// fencing's, or the round's).
func (l *Locker) failed(ctx context.Context, a *attemptRound, err error) error {
	var releaseTiming *latencies
	if a.timing != nil {
		releaseTiming = l.timing()
	}
	skip := refusedIn(a.round)
	if l.opts.unsafe.NoReleaseOnFailure {
		skip = func(int) error { return errNotReleased } // the simulator's control: see internal/unsafelocker
	}
	released := l.release(ctx, releasing{key: a.req.key, multi: a.req.multi, value: a.value, after: a.round, ttl: a.req.granted, timing: releaseTiming, skip: skip})
	if a.timing != nil {
		// Before waiting for the granted nodes: the release's report
		// must be counted in flight (Drain) before this attempt returns.
		l.watchRelease(*a, released, releaseTiming)
	}
	l.waitGranted(released, a.tally)
	if err == nil {
		err = l.roundError(ctx, "acquire", a.cmd, a.tally, a.timing)
	}
	if a.timing != nil {
		l.emit(Event{Op: OpAcquire, Key: a.req.key, Attempt: a.n, Duration: l.opts.Clock.Now().Sub(a.start), Err: err, Nodes: l.nodeResultsOf(err, a.tally, a.timing), Stalled: a.tally.Late})
		l.reportNodes(OpAcquire, a.req.key, a.round, a.tally, true)
	}
	return err
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

// releasing is a release to send to every node: a lease's keys and
// value, each node's after its call in the round that set the value.
type releasing struct {
	key   string
	multi []string // a multi-key lease's keys
	value string
	after *quorum.Round[Outcome]
	// ttl bounds how long each call may take (at least NodeTimeout): a
	// release that is slow (EVALSHA answered NOSCRIPT late, and EVAL must
	// follow) is still worth sending until the key would have expired
	// anyway.
	ttl    time.Duration
	timing *latencies
	skip   func(int) error // the nodes not sent it (see refusedIn); nil: none
	// passed is nil for a failed attempt's release; for a lease's Unlock
	// it counts the nodes whose release named another Locker's turn: the
	// script then publishes the release to the key's waiters (see package
	// notice).
	passed *atomic.Int32
}

// release sends r's compare-and-delete to every node, each after that
// node's call in r.after (see fan.after). It is cleanup, so it runs
// detached from the caller's context (a caller who gave up still cleans
// up).
//
// A lease's Unlock (r.passed set) makes each node that deletes the value
// publish it on the key's release channel (package notice), to wake
// waiters elsewhere; a failed attempt's release does not, since the key
// was not theirs to wait for (waking every other Locker's head at each
// lost attempt would make a storm of attempts under contention).
func (l *Locker) release(ctx context.Context, r releasing) *quorum.Round[Outcome] {
	f := fan{after: r.after, skip: r.skip, timeout: max(r.ttl, l.opts.NodeTimeout), release: r.key, releaseAll: r.multi, timing: r.timing, passed: r.passed}
	c, read := l.releaseCommand(r.key, r.multi, r.value, r.passed != nil)
	return l.fanOut(context.WithoutCancel(ctx), f, c.Of(r.value, wire.RoleReleases), read)
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
