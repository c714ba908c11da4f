package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock/internal/notice"
)

// A Lease is one acquisition of a lock. It is safe for concurrent use;
// Extend, Unlock and Check on one lease run one at a time.
type Lease struct {
	locker *Locker
	// keys are the lease's keys, sorted and distinct (see TryLockMulti):
	// one for most leases, whose Key is keys[0]; tokens, with
	// Options.Fencing, their fencing tokens, one per key (nil without).
	// A lease of one key keeps both in key and token, so that its shape
	// costs it no allocation of its own.
	keys   []string
	tokens []uint64
	key    [1]string
	token  [1]uint64
	value  string
	// acquiredAt is when the acquisition began, on the Locker's clock.
	acquiredAt time.Time
	// acquired: the last round that may set the lease's key on a node
	// (the acquisition's SETs, then each extension, which heals missing
	// keys). Without a pipeline, each extension's call on a node, and the
	// release, wait for that round's call on the node: a healing extension
	// that landed after the release would set the key again. (The release
	// also waits for the Locker's other calls that may set the value, those
	// of another copy of the lease: see calls.) Under op.
	acquired *quorum.Round[Outcome]
	heldBy   *quorum.Round[Outcome] // the round that set the current validity (acquisition or last extension); under op

	// passed: Unlock's nodes whose release named another Locker's turn
	// (a field, not a local, so that Unlock allocates nothing for it)
	passed atomic.Int32
	doing  atomic.Bool // running under Lease.Do, which takes a lease once at a time

	op     sync.Mutex // serializes Extend, Unlock and Check
	script []string   // the extend and check scripts' keys (scriptKeys); under op

	mu      sync.Mutex
	holders *quorum.Round[Outcome] // heldBy, for Holders
	until   time.Time
	ttl     time.Duration // the longest TTL any node may have been given
	// span is the TTL behind the current validity (the acquisition's, or
	// the last extension's that set until): Done's margin is a tenth of
	// it, never of ttl, so that a lease taken long and then extended short
	// (Lease.Do with a shorter TTL) is not given up before each extension
	span     time.Duration
	unlocked bool
	lost     bool          // the lease ran out or a round found it gone
	closed   bool          // lost or unlocked: done is (or will be made) closed
	done     chan struct{} // made by Done
	timer    *time.Timer   // closes done at Until minus the margin
}

// Key returns the lock's key.
func (l *Lease) Key() string {
	if l == nil || len(l.keys) == 0 { // nil, or a zero Lease not made by a Locker
		return ""
	}
	return l.keys[0]
}

// Value returns this acquisition's random value, which the nodes hold while
// the lease does.
func (l *Lease) Value() string {
	if l == nil {
		return ""
	}
	return l.value
}

// Token returns this acquisition's fencing token, or 0 without
// Options.Fencing. Tokens of one key grow with every acquisition that began
// after another returned, and are never issued twice; tokens of different
// keys are unrelated. Pass it with every write to the protected resource and
// have the resource reject tokens lower than one it accepted (package fence).
func (l *Lease) Token() uint64 {
	if l == nil || l.tokens == nil {
		return 0
	}
	return l.tokens[0]
}

// Until returns the end of the lease's validity, on the Locker's monotonic
// clock: the acquisition's (or last extension's) start plus the TTL minus the
// drift allowance. Compare it only with readings of the same clock.
func (l *Lease) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Validity returns the validity left now; <= 0 once the lease has expired,
// failed to extend, or been unlocked.
func (l *Lease) Validity() time.Duration {
	if l.holdsNothing() {
		return 0
	}
	return l.Until().Sub(l.locker.opts.Clock.Now())
}

// expire marks the lease lost: no validity left, and Done closed.
func (l *Lease) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until = time.Time{}
	l.loseLocked()
}

func (l *Lease) loseLocked() {
	if !l.closed {
		l.lost = true
	}
	l.closeLocked()
}

func (l *Lease) closeLocked() {
	if l.closed {
		return
	}
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.done != nil {
		close(l.done)
	}
}

// closed is the channel Done returns for a nil *Lease.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Done returns a channel that is closed when the lease is lost: a safety
// margin (the smaller of NodeTimeout and a tenth of the TTL) before its
// validity runs out, when an Extend or Check finds it gone, or when it is
// unlocked. Work protected by the lease should stop when it closes.
func (l *Lease) Done() <-chan struct{} {
	if l.holdsNothing() {
		return closed // a nil lease holds nothing
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if l.closed {
			close(l.done)
		} else {
			l.timer = time.AfterFunc(l.leftLocked(), l.checkExpiry)
		}
	}
	return l.done
}

// leftLocked is the time until Done should close, on the Locker's clock.
func (l *Lease) leftLocked() time.Duration {
	margin := min(l.locker.opts.NodeTimeout, l.span/10)
	return l.until.Sub(l.locker.opts.Clock.Now()) - margin
}

// checkExpiry runs when the timer fires: the lease's clock may be a fake or
// the lease may have been extended meanwhile, so it looks again.
func (l *Lease) checkExpiry() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if left := l.leftLocked(); left > 0 {
		l.timer.Reset(left)
		return
	}
	l.loseLocked()
}

// endedAt reports whether the lease was unlocked (by its holder) and, if
// not, whether its validity had run out at now.
func (l *Lease) endedAt(now time.Time) (unlocked, ranOut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unlocked, !l.unlocked && !l.until.After(now)
}

// isLost reports whether the lease was lost (not merely unlocked).
func (l *Lease) isLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// usable reports why the lease cannot be extended or checked, if it cannot.
func (l *Lease) usable(op string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.unlocked:
		return fmt.Errorf("redlock: %s %s: %w: the lease was unlocked", op, l.name(), ErrNotHeld)
	case !l.until.After(l.locker.opts.Clock.Now()):
		return fmt.Errorf("redlock: %s %s: %w: its validity ran out", op, l.name(), ErrNotHeld)
	}
	return nil
}

// Extend resets the lock's expiry to ttl on every node that still holds this
// lease's value, and succeeds when a majority did so with validity left,
// measured from the start of the extension. It refuses a lease whose validity
// has already run out: a lapsed lock is not resurrected.
//
// A failed Extend takes away only what the nodes said. The lease is lost
// (Validity <= 0, Done closed) when nodes that held its value answered that
// it is gone or replaced, leaving fewer than a majority that may still hold
// it, or when a majority answered so. Where nodes merely failed or were
// slow, or only nodes that never held the value answered that it is missing,
// nothing was refuted: the keys expire no earlier than before, and no earlier
// than the extension's TTL where it applied, so the lease keeps the smaller
// of its validity and the extension's, and Extend may be tried again.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := l.made("Extend"); err != nil {
		return err
	}
	req, err := l.locker.request(ctx, "extend", l.keys[0], ttl)
	if err != nil {
		return err
	}
	l.op.Lock()
	defer l.op.Unlock()
	if err := l.usable("extend"); err != nil {
		return err
	}
	lk := l.locker
	start := lk.opts.Clock.Now()
	l.mu.Lock()
	l.ttl = max(l.ttl, req.granted)
	left := min(req.budget, l.until.Sub(start)) // what the lease still has
	l.mu.Unlock()
	heal := "1" // set the key again where it is missing (see Options.NoHeal)
	if lk.opts.NoHeal {
		heal = "0"
	}
	c := l.extendCommand(req.ms, heal)
	timing := lk.timing()
	round := lk.fanOut(ctx, fan{after: l.acquired, timeout: lk.opts.NodeTimeout, timing: timing}, c, readScript)
	l.acquired = round
	wait := min(lk.opts.NodeTimeout, req.budget)
	tally := round.DecideWithin(ctx, wait, lk.stallGrace(wait, left), granted)
	until := start.Add(req.budget - lk.fastClocks(tally, req.granted))
	if now := lk.opts.Clock.Now(); tally.Won && until.After(now) {
		l.heldBy = round
		l.mu.Lock()
		l.holders = round
		l.setUntilLocked(until, req.granted)
		l.mu.Unlock()
		if timing != nil {
			lk.emit(Event{Op: OpExtend, Key: l.keys[0], Duration: now.Sub(start), Token: l.Token(), Validity: until.Sub(now), Nodes: lk.resultsInto(timing.eventNodes(len(tally.Votes)), tally, timing, nil), Stalled: tally.Late})
			lk.reportNodes(OpExtend, l.keys[0], round, tally, true)
		}
		return nil
	}
	e := lk.roundError(ctx, "extend", c, tally, timing)
	if timing != nil {
		defer func() {
			lk.emit(Event{Op: OpExtend, Key: l.keys[0], Duration: lk.opts.Clock.Now().Sub(start), Token: l.Token(), Err: e, Nodes: lk.nodeResultsOf(e, tally, timing), Stalled: tally.Late})
			lk.reportNodes(OpExtend, l.keys[0], round, tally, true)
		}()
	}
	if errors.Is(e.Cause, ErrNotHeld) || l.refuted(tally) {
		// Lost: the error says so, whatever else it says (a context that
		// ended meanwhile, too few answers to count the refusals alone).
		switch {
		case e.Cause == nil:
			e.Cause = ErrNotHeld
		case !errors.Is(e.Cause, ErrNotHeld):
			e.Cause = fmt.Errorf("%w: %w", ErrNotHeld, e.Cause)
		}
		l.expire()
	} else {
		l.shorten(until, req.granted)
	}
	return e
}

// Holders returns how many nodes hold the lease as far as this process
// knows: those that granted its acquisition, or its last successful
// extension, including grants that arrived after the decision and, with
// healing (see Options.NoHeal), nodes that had forgotten the lease and hold
// it again. A node whose vote the node guard did not count is not among
// them. It costs no round trip.
func (l *Lease) Holders() int {
	if l.holdsNothing() {
		return 0
	}
	l.mu.Lock()
	round := l.holders
	l.mu.Unlock()
	n := 0
	for i := range len(l.locker.nodes) {
		select {
		case <-round.Settled(i):
		default:
			continue
		}
		if o, err := round.Result(i); err == nil && o == Granted {
			n++
		}
	}
	return n
}

// refuted reports whether tally's answers leave fewer than a majority of
// nodes that may still hold the lease: of the nodes that granted the round
// that set its validity (heldBy; a grant that arrived after that round's
// decision counts too), those that now answered that the value is gone or
// replaced no longer hold it. A node that never granted says nothing by
// answering that the value is missing. l.op is held.
func (l *Lease) refuted(tally quorum.Tally[Outcome]) bool {
	may := 0
	for i, v := range tally.Votes {
		select {
		case <-l.heldBy.Settled(i):
		default:
			continue // still unanswered: not known to hold it
		}
		if o, err := l.heldBy.Result(i); err != nil || o != Granted {
			continue
		}
		if v.Replied && v.Err == nil && (v.Value == Taken || v.Value == Missing || v.Value == Revoked) {
			continue // held it, and no longer does
		}
		may++
	}
	return may < tally.Need
}

// shorten brings the lease's validity forward to until, the end of a
// round for span, if that is earlier.
func (l *Lease) shorten(until time.Time, span time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until.Before(l.until) {
		l.setUntilLocked(until, span)
	}
}

// setUntilLocked moves the end of validity, set by a round for span, and
// Done's timer with it.
func (l *Lease) setUntilLocked(until time.Time, span time.Duration) {
	l.until, l.span = until, span
	if l.timer != nil && !l.closed {
		l.timer.Reset(l.leftLocked())
	}
}

// Unlock deletes this lease's value on every node, each after that node's
// acquiring SET (queued behind it on the node's pipeline, or sent once it has
// returned), so a late SET cannot land after its delete.
// A later acquisition of the same key through this Locker waits on each node
// for these deletes, so it cannot trip over them. It returns nil when a majority deleted the value; ErrNotHeld when nodes
// answered that the value was already gone or replaced (the lock had expired
// or been lost, so exclusion may have been broken), or when the lease was
// already unlocked; a *QuorumError when nodes failed.
//
// Unlock cleans up even when ctx is already done: releases are sent on a
// context detached from ctx. It returns once a majority answered, and
// waits for the nodes as long as the lease had validity left, at least
// NodeTimeout and at most StallAfter (ten NodeTimeouts, at least half a
// second): a release eats no validity, and one that fails for a slow reply
// leaves the keys behind until their TTL.
func (l *Lease) Unlock(ctx context.Context) error {
	if err := l.made("Unlock"); err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background() // nothing to inherit; cleanup must still run
	}
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	already := l.unlocked
	l.unlocked = true
	left := l.until.Sub(l.locker.opts.Clock.Now()) // what the lease still had
	l.until = time.Time{}
	ttl := l.ttl
	l.closeLocked()
	l.mu.Unlock()
	if already {
		return fmt.Errorf("redlock: unlock %q: %w: the lease was already unlocked", l.keys[0], ErrNotHeld)
	}
	lk := l.locker
	detached := context.WithoutCancel(ctx)
	start := lk.opts.Clock.Now()
	timing := lk.timing()
	// This Locker wakes its own waiters (Released below), not its notices.
	for _, k := range l.keys {
		lk.notices.Expect(k, l.value)
	}
	round := lk.release(ctx, releasing{key: l.keys[0], multi: l.multi(), value: l.value, after: l.acquired, ttl: ttl, timing: timing, passed: &l.passed})
	tally := round.Decide(detached, lk.releaseWait(left), granted)
	// The next Lock waiting here tries at once, unless the release named
	// another Locker's turn: it then joins the key's line. Named by most
	// of the nodes that released, not by one: a minority's stale place (a
	// Locker gone, a line that differs) must not cost this one's waiter a
	// poll, and the Hub weighs other Lockers' notices alike.
	if len(l.keys) == 1 {
		lk.turns.Released(l.keys[0], notice.Most(int(l.passed.Load()), tally.Accepted))
	} else {
		for _, k := range l.keys {
			lk.turns.Released(k, false) // a multi-key release names no one's turn
		}
	}
	var err error
	if !tally.Won {
		c, _ := lk.releaseCommand(l.keys[0], l.multi(), l.value, true)
		err = lk.roundError(detached, "unlock", c, tally, timing)
	}
	if timing != nil {
		lk.emit(Event{Op: OpUnlock, Key: l.keys[0], Duration: lk.opts.Clock.Now().Sub(start), Token: l.Token(), Err: err, Nodes: lk.nodeResultsOf(err, tally, timing), Stalled: timing.noneWithin(lk.opts.NodeTimeout)})
		lk.reportNodes(OpUnlock, l.keys[0], round, tally, false)
	}
	return err
}

// Check asks the nodes whether the lease still holds: nil when a majority
// hold its value and validity is left; ErrNotHeld when it ran out or nodes
// answered that the value is gone; a *QuorumError when nodes failed. Check
// reads the masters (never replicas) and changes nothing.
func (l *Lease) Check(ctx context.Context) error {
	if err := l.made("Check"); err != nil {
		return err
	}
	if ctx == nil {
		return fmt.Errorf("redlock: check %q: nil context", l.keys[0])
	}
	if ctx.Err() != nil {
		return fmt.Errorf("redlock: check %q: %w", l.keys[0], contextError(ctx))
	}
	l.op.Lock()
	defer l.op.Unlock()
	if err := l.usable("check"); err != nil {
		return err
	}
	lk := l.locker
	c := l.checkCommand()
	start := lk.opts.Clock.Now()
	timing := lk.timing()
	round := lk.fanOut(ctx, fan{timeout: lk.opts.NodeTimeout, timing: timing}, c, readScript)
	tally := round.DecideWithin(ctx, lk.opts.NodeTimeout, lk.stallGrace(lk.opts.NodeTimeout, l.Until().Sub(start)), granted)
	var err error
	if !tally.Won {
		e := lk.roundError(ctx, "check", c, tally, timing)
		if errors.Is(e.Cause, ErrNotHeld) {
			l.expire()
		}
		err = e
	} else {
		err = l.usable("check")
	}
	if timing != nil {
		lk.emit(Event{Op: OpCheck, Key: l.keys[0], Duration: lk.opts.Clock.Now().Sub(start), Token: l.Token(), Err: err, Nodes: lk.nodeResultsOf(err, tally, timing), Stalled: tally.Late})
		lk.reportNodes(OpCheck, l.keys[0], round, tally, true)
	}
	return err
}
