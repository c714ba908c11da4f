package redlock

import "sync"

// turns are a Locker's Lock calls waiting for each key, in arrival order.
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
// not count). A waiter is in the queue before its first attempt, and a
// wake-up is kept until it is taken (a buffered signal), so that a release
// between an attempt that found the key taken and the wait that follows is
// never missed. Releases by other processes are not seen here: the head
// polls at RetryDelay for them.
type turns struct {
	mu   sync.Mutex
	keys map[string]*queue
}

// queue is one key's waiters; waiters[0] is the head.
type queue struct {
	waiters []*waiter
	// held: a lease of this Locker's won the key since its last release
	// here, so that the next head waits for the release (or its poll)
	// rather than sending an acquisition that would find the key taken.
	held bool
}

// waiter is one Lock call in a queue.
type waiter struct {
	wake chan struct{} // buffered: a turn or a release, kept until taken
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default: // already signalled
	}
}

// join puts a new waiter for key at the back of its queue. first reports
// whether it is the head, and held whether a lease of this Locker holds
// the key (the head then waits before its first attempt).
func (t *turns) join(key string) (w *waiter, first, held bool) {
	w = &waiter{wake: make(chan struct{}, 1)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys == nil {
		t.keys = map[string]*queue{}
	}
	q := t.keys[key]
	if q == nil {
		q = &queue{}
		t.keys[key] = q
	}
	q.waiters = append(q.waiters, w)
	return w, len(q.waiters) == 1, q.held
}

// head reports whether w is the head of key's queue, and whether a lease
// of this Locker holds the key.
func (t *turns) head(key string, w *waiter) (first, held bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.keys[key]
	if q == nil || len(q.waiters) == 0 {
		return false, false
	}
	return q.waiters[0] == w, q.held
}

// leave takes w out of key's queue: won says it leaves with a lease. The
// next waiter, if w was the head, becomes the head and is woken.
func (t *turns) leave(key string, w *waiter, won bool) {
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

// released tells key's queue that a lease of this Locker released the key:
// its head is woken to try at once.
func (t *turns) released(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.keys[key]
	if q == nil {
		return
	}
	q.held = false
	if len(q.waiters) > 0 {
		q.waiters[0].signal()
	}
}

// waiting is how many Lock calls wait for key (for tests).
func (t *turns) waiting(key string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q := t.keys[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}
