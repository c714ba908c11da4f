// Package waitq is a Locker's queue of Lock calls waiting for each key, in
// arrival order (see Queues). It knows nothing of nodes or leases: the
// coordinator (redlock's Lock, Unlock) says when a waiter won, gave up, or
// a lease of its Locker released the key.
package waitq

import (
	"sync"
	"sync/atomic"
	"time"
)

// Queues are a Locker's Lock calls waiting for each key, in arrival order.
// Only the head of a key's queue sends acquisitions; the others wait for
// their turn, so that a busy key costs one waiter's commands per hand-off,
// not every waiter's (a herd of clients × nodes commands), and waiters are
// served in the order they came. A Lock that returns (with a lease, or
// because its context ended) leaves the queue, and the next waiter moves
// up. A Lock that comes after others are waiting goes behind them, even
// one from a client that has just released the key.
//
// What wakes a waiter: becoming the head, and, for the head, a release of
// the key by this Locker (Lease.Unlock, a failed attempt's release does
// not count) or one heard from elsewhere (Notice). A waiter is in the
// queue before its first attempt, and a wake-up is kept until it is taken
// (a buffered signal), so that a release between an attempt that found
// the key taken and the wait that follows is never missed. Why says what
// woke the head; releases no notice tells of are found by the head's poll.
type Queues struct {
	// PassedFor is how long a release that passed the turn to another
	// Locker, with no waiter here to take note, keeps the next Lock call
	// for the key out of the way (see Join); 0: not at all. Set it before
	// the first call.
	PassedFor time.Duration

	mu     sync.Mutex
	keys   map[string]*queue
	passed map[string]time.Time // keys whose release passed the turn with no waiter here, and when
}

// queue is one key's waiters; waiters[0] is the head.
type queue struct {
	waiters []*Waiter
	// held: a lease of this Locker's won the key since its last release
	// here, so that the next head waits for the release (or its poll)
	// rather than sending an acquisition that would find the key taken.
	held bool
}

// Waiter is one Lock call in a queue. Its Wake channel receives a turn or
// a release, kept until taken.
type Waiter struct {
	Wake chan struct{} // buffered: a turn or a release, kept until taken
	why  atomic.Uint32 // the Why of each release that woke it, since Woken
}

// Why is what woke a head, beyond moving up: a set of reasons, since one
// wake-up may stand for several.
type Why uint32

const (
	// ReleasedHere: a lease of this Locker released the key, naming no
	// other Locker's turn. Try at once.
	ReleasedHere Why = 1 << iota
	// Passed: a lease of this Locker released the key and named another
	// Locker, next in the key's line on the nodes (see package notice).
	// Join the line and wait; do not try.
	Passed
	// NamedThis: a release elsewhere named this Locker. Try at once.
	NamedThis
	// NamedNobody: a release elsewhere named no Locker: every Locker's
	// head heard it at the same moment. Try, after a stagger.
	NamedNobody
	// NamedOther: a release elsewhere named another Locker. It wakes no
	// one (Notice only clears held).
	NamedOther
	// NamedSome: a release elsewhere named this Locker on some nodes, not
	// most (their lines differ). Try, after a stagger; its place in those
	// lines is gone.
	NamedSome
)

// Woken returns why w was woken since the last call (0: it moved up, or
// a release was already taken).
func (w *Waiter) Woken() Why { return Why(w.why.Swap(0)) }

func (w *Waiter) wake(why Why) {
	w.why.Or(uint32(why))
	w.signal()
}

func (w *Waiter) signal() {
	select {
	case w.Wake <- struct{}{}:
	default: // already signalled
	}
}

// Join puts a new waiter for key at the back of its queue. first reports
// whether it is the head, and held whether a lease of this Locker holds
// the key (the head then waits before its first attempt). passed reports
// that the key's last release here, less than PassedFor ago, named another
// Locker's turn while no one waited here (a client that unlocked and at
// once locks again, say): the head then joins the key's line and waits for
// its turn, as a waiter would have, instead of racing the named Locker's
// attempt (the two would split the nodes, and both wait for a poll).
func (t *Queues) Join(key string) (w *Waiter, first, held, passed bool) {
	w = &Waiter{Wake: make(chan struct{}, 1)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys == nil {
		t.keys = map[string]*queue{}
	}
	q := t.keys[key]
	if q == nil {
		q = &queue{}
		t.keys[key] = q
		if at, ok := t.passed[key]; ok {
			delete(t.passed, key)
			passed = time.Since(at) < t.PassedFor
		}
	}
	q.waiters = append(q.waiters, w)
	return w, len(q.waiters) == 1, q.held, passed
}

// Head reports whether w is the head of key's queue, and whether a lease
// of this Locker holds the key.
func (t *Queues) Head(key string, w *Waiter) (first, held bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.keys[key]
	if q == nil || len(q.waiters) == 0 {
		return false, false
	}
	return q.waiters[0] == w, q.held
}

// Leave takes w out of key's queue: won says it leaves with a lease. The
// next waiter, if w was the head, becomes the head and is woken.
func (t *Queues) Leave(key string, w *Waiter, won bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.keys[key]
	if q == nil {
		return
	}
	i := -1
	for j, o := range q.waiters {
		if o == w {
			i = j
			break
		}
	}
	if i < 0 {
		return
	}
	q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
	if won {
		q.held = true
	}
	if len(q.waiters) == 0 {
		delete(t.keys, key) // a key no one waits for keeps nothing
		return
	}
	if i == 0 {
		q.waiters[0].signal()
	}
}

// Released tells key's queue that a lease of this Locker released the key:
// its head is woken, to try at once, or, where passed (the release named
// another Locker's turn), to join the key's line.
func (t *Queues) Released(key string, passed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.keys[key]
	if q == nil {
		if passed && t.PassedFor > 0 {
			t.markPassed(key)
		}
		return
	}
	q.held = false
	if len(q.waiters) > 0 {
		why := ReleasedHere
		if passed {
			why = Passed
		}
		q.waiters[0].wake(why)
	}
}

// markPassed notes that key's release passed the turn with no waiter
// here; t.mu held. Marks older than PassedFor are dropped as others are
// added, so that keys never locked again keep nothing for long.
func (t *Queues) markPassed(key string) {
	now := time.Now()
	if t.passed == nil {
		t.passed = map[string]time.Time{}
	}
	if len(t.passed) >= 64 {
		for k, at := range t.passed {
			if now.Sub(at) >= t.PassedFor {
				delete(t.passed, k)
			}
		}
	}
	t.passed[key] = now
}

// Notice tells key's queue that the key was released elsewhere (another
// process's lease, heard on its release channel), and whose turn the
// release named: NamedThis, NamedSome, NamedNobody, or NamedOther (which wakes no
// one).
func (t *Queues) Notice(key string, named Why) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// A lease of this Locker marked held may have expired unreleased, and
	// another holder's release is what this says: held no longer (an old
	// notice costs one attempt that finds the key taken).
	if q := t.keys[key]; q != nil && len(q.waiters) > 0 {
		q.held = false
		if named != NamedOther {
			q.waiters[0].wake(named)
		}
	}
}

// NoticeAgain tells key's queue of a release Notice told of before, now
// that its last nodes have released too: the attempt the first notice
// woke may have lost on them. It wakes the head as Notice does, unless a
// lease of this Locker has won the key since (held), and leaves held as
// it is: the release it tells of is older than that lease.
func (t *Queues) NoticeAgain(key string, named Why) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q := t.keys[key]; q != nil && len(q.waiters) > 0 && !q.held && named != NamedOther {
		q.waiters[0].wake(named)
	}
}

// Waiting is how many Lock calls wait for key.
func (t *Queues) Waiting(key string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q := t.keys[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}
