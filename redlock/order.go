package redlock

import (
	"context"
	"sync"
)

// calls tracks one kind of this Locker's calls still in flight on the
// direct transport, per name (a key, a lease's value) and node, so that a
// later call can wait for those that began before it on that node. A
// pipelined node needs none of it: its commands run in the order they were
// queued.
//
// Two kinds are tracked (Locker.releases, Locker.setting):
//
// Releases of a key, which an acquisition of the key waits for before it
// sends its SET to the node. Without it, a client that unlocks and at once
// locks the same key again can trip over its own straggler: a release that
// waits for a slow SET reply (or is merely still in flight on another
// pooled connection) arrives after the new SET, which then finds the old
// value and counts as contention. Waiting gives each (key, node) the order
// one connection would: SET, its DEL, the next SET.
//
// Calls that may set a lease's value (its acquisition, fencing's phase 2,
// its extensions, which heal a missing key), which every release of that
// value waits for. The invariant: on a node without a pipeline, a release
// of a value is sent only once every call of this Locker that began before
// it and may set that value there has returned. A lease's own rounds are
// ordered by fan.after already; this covers its other copies, a lease
// handed over (Lease.Handle) and resumed on the same Locker, whose Unlock
// would otherwise reach a node before the first copy's straggling
// extension, which then sets the key again for its TTL with no one holding
// it.
//
// Only calls begun before the waiting one are waited for, so a stream of
// new ones cannot starve it; and a hung node's wait ends with the waiting
// call's own timeout, so no more commands pile up behind it.
type calls struct {
	mu    sync.Mutex
	tails map[string][]chan struct{} // per name, per node: closed once the latest call there, and all before it, finished
	count map[string]int             // calls in flight per name, to forget names with none
}

// start records a call under key on node i and returns the func that marks
// it finished. Call it before the call is queued. Calls under one key on one
// node finish in the order they started (finish waits for the one before),
// so a later call need only wait for the latest.
func (r *calls) start(key string, i, nodes int) (finish func()) {
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

// startAll records a call under every key of a multi-key lease on node i
// (see start). A one-key release calls start itself: startAll's slice of
// finishes and the closure over it would cost every release two more
// allocations per node.
func (r *calls) startAll(keys []string, i, nodes int) (finish func()) {
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

// snapshot returns, per node, the latest call under key in flight now (nil
// where there is none).
func (r *calls) snapshot(key string) []chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	tails := r.tails[key]
	if tails == nil {
		return nil
	}
	return append([]chan struct{}(nil), tails...)
}

// waitFor waits until the call in snap on node i, and every one before it,
// has finished, or ctx ends.
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

// earlierReleases are this Locker's releases in flight of req's key, or of
// any of its keys, per node (see releases): for a multi-key request, a node
// with releases of several of its keys waits for all of them.
func (l *Locker) earlierReleases(req request) []chan struct{} {
	if req.multi == nil {
		return l.releases.snapshot(req.key)
	}
	var merged []chan struct{}
	for _, k := range req.multi {
		snap := l.releases.snapshot(k)
		if snap == nil {
			continue
		}
		if merged == nil {
			merged = snap
			continue
		}
		for i, c := range snap {
			switch {
			case c == nil:
			case merged[i] == nil:
				merged[i] = c
			default:
				merged[i] = allClosed(merged[i], c)
			}
		}
	}
	return merged
}

// allClosed returns a channel closed once both a and b are.
func allClosed(a, b chan struct{}) chan struct{} {
	both := make(chan struct{})
	go func() {
		<-a
		<-b
		close(both)
	}()
	return both
}
