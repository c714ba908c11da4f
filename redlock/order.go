package redlock

import (
	"context"
	"sync"
)

// releases tracks this Locker's releases still in flight, per key and node,
// so that an acquisition waits for those that began before it did before it
// sends its SET to that node.
//
// Without it, a client that unlocks and at once locks the same key again can
// trip over its own straggler: a release that waits for a slow SET reply (or
// is merely still in flight on another pooled connection) arrives after the
// new SET, which then finds the old value and counts as contention. Waiting
// gives each (key, node) the order one connection would: SET, its DEL, the
// next SET. Only releases begun before the attempt are waited for, so a
// stream of new ones cannot starve it; and a hung node's wait ends with the
// attempt's NodeTimeout, so no more commands pile up behind it.
type releases struct {
	mu    sync.Mutex
	tails map[string][]chan struct{} // per key, per node: closed once the latest release there, and all before it, finished
	count map[string]int             // releases in flight per key, to forget keys with none
}

// start records a release of key on node i and returns the func that marks it
// finished. Call it before the release is queued. Releases of one key on one
// node finish in the order they started (finish waits for the one before),
// so an acquisition need only wait for the latest.
func (r *releases) start(key string, i, nodes int) (finish func()) {
	done := make(chan struct{})
	r.mu.Lock()
	if r.tails == nil {
		r.tails, r.count = map[string][]chan struct{}{}, map[string]int{}
	}
	tails := r.tails[key]
	if tails == nil {
		tails = make([]chan struct{}, nodes)
		r.tails[key] = tails
	}
	prev := tails[i]
	tails[i] = done
	r.count[key]++
	r.mu.Unlock()
	return func() {
		if prev != nil {
			<-prev
		}
		close(done)
		r.mu.Lock()
		defer r.mu.Unlock()
		if tails[i] == done {
			tails[i] = nil
		}
		if r.count[key]--; r.count[key] == 0 {
			delete(r.tails, key)
			delete(r.count, key)
		}
	}
}

// startAll records a release of every key of a multi-key lease on node i
// (see start).
func (r *releases) startAll(keys []string, i, nodes int) (finish func()) {
	finishes := make([]func(), len(keys))
	for k, key := range keys {
		finishes[k] = r.start(key, i, nodes)
	}
	return func() {
		for _, f := range finishes {
			f()
		}
	}
}

// snapshot returns, per node, the latest release of key in flight now (nil
// where there is none).
func (r *releases) snapshot(key string) []chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	tails := r.tails[key]
	if tails == nil {
		return nil
	}
	return append([]chan struct{}(nil), tails...)
}

// waitFor waits until the release in snap on node i, and every one before
// it, has finished, or ctx ends.
func waitFor(ctx context.Context, snap []chan struct{}, i int) error {
	if snap == nil || snap[i] == nil {
		return nil
	}
	select {
	case <-snap[i]:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
