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
	mu      sync.Mutex
	pending map[string][]map[chan struct{}]struct{} // per key, per node
}

// start records a release of key on node i and returns the func that marks it
// finished. Call it before the release is queued.
func (r *releases) start(key string, i, nodes int) (finish func()) {
	done := make(chan struct{})
	r.mu.Lock()
	if r.pending == nil {
		r.pending = map[string][]map[chan struct{}]struct{}{}
	}
	perNode := r.pending[key]
	if perNode == nil {
		perNode = make([]map[chan struct{}]struct{}, nodes)
		r.pending[key] = perNode
	}
	if perNode[i] == nil {
		perNode[i] = map[chan struct{}]struct{}{}
	}
	perNode[i][done] = struct{}{}
	r.mu.Unlock()
	return func() {
		close(done)
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(perNode[i], done)
		for _, set := range perNode {
			if len(set) > 0 {
				return
			}
		}
		delete(r.pending, key)
	}
}

// snapshot returns, per node, the releases of key in flight now.
func (r *releases) snapshot(key string) [][]chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	perNode := r.pending[key]
	if perNode == nil {
		return nil
	}
	out := make([][]chan struct{}, len(perNode))
	for i, set := range perNode {
		for c := range set {
			out[i] = append(out[i], c)
		}
	}
	return out
}

// waitFor waits until every release in snap on node i has finished, or ctx ends.
func waitFor(ctx context.Context, snap [][]chan struct{}, i int) error {
	if snap == nil {
		return nil
	}
	for _, c := range snap[i] {
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
