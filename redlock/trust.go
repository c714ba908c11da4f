package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/redlock/internal/guard"
	"github.com/redlock/redlock/redlock/internal/reply"
)

// Lifting the node guard's quarantine of forgetful nodes: by the
// operator's word (TrustNodes), or where the deployment is provably new
// and unused (TrustNewNodes).

// TrustNodes declares every node's current memory complete: a new
// deployment known to hold no locks, or nodes whose data the operator knows
// to be whole. It lifts the guard's quarantine for each node's current
// server process, for every Locker; a later restart without persistence, or
// a flush, is caught again. On a Redis Cluster node it marks every hash
// slot, through the masters that serve them. It does not lift a quarantine
// for a clock jump. It returns every node's error, after trying them all.
func (l *Locker) TrustNodes(ctx context.Context) error {
	if err := l.made("TrustNodes"); err != nil {
		return err
	}
	if ctx == nil {
		return errors.New("redlock: TrustNodes: nil context")
	}
	errs := make([]error, len(l.nodes))
	var wg sync.WaitGroup
	for i, n := range l.nodes {
		wg.Go(func() {
			if err := guard.Trust(ctx, n.Node, l.opts.MaxTTL, l.opts.WaitReplicas); err != nil {
				errs[i] = fmt.Errorf("redlock: TrustNodes: %s: %w", n.name, err)
				return
			}
			if n.guard != nil {
				errs[i] = n.guard.Forget(ctx, n.Node)
			}
		})
	}
	wg.Wait()
	return joinErrors(errs...)
}

// TrustNewNodes trusts every node, as TrustNodes does, only if the
// deployment is new: no node holds a key that may be a lease (any key but
// the library's own bookkeeping), and no node has been able to count for a
// guarded lease since its memory began (each is still in the quarantine of
// its first examination). It reports whether it trusted them. A program
// may call it on every start: on the first runs against servers just
// started it spares each node the MaxTTL the guard would keep it out; once
// the deployment is in use it does nothing, so a node that restarted empty
// beside nodes that remember a lease still waits out its quarantine. It
// examines every node now, with a guard of the moment for a Locker with
// NoQuarantine (a node that does not answer is an error, and nothing is
// trusted). A server shared with other data is never new to it. A Redis
// Cluster node is an error: trust one by hand.
//
// Its check and its trust are two steps: a node is trusted only if its
// marker is still the one the check saw, for the same server process, so
// a node that restarted, was flushed or failed over in between (while
// this program was paused, say, and another used the deployment) keeps
// its quarantine, and TrustNewNodes reports false. What it cannot tell: a
// deployment where a majority lost its memory at once (restarted without
// persistence, flushed) while a lease was held looks new. Where that can
// happen, leave it out and trust by hand (redlock-admin trust, or
// TrustNodes) once the longest lease has run out.
func (l *Locker) TrustNewNodes(ctx context.Context) (bool, error) {
	if err := l.made("TrustNewNodes"); err != nil {
		return false, err
	}
	if ctx == nil {
		return false, errors.New("redlock: TrustNewNodes: nil context")
	}
	used := make([]bool, len(l.nodes))
	seen := make([]guard.Seen, len(l.nodes))
	errs := make([]error, len(l.nodes))
	var wg sync.WaitGroup
	for i, n := range l.nodes {
		wg.Go(func() {
			var err error
			defer func() {
				if err != nil {
					errs[i] = fmt.Errorf("redlock: TrustNewNodes: %s: %w", n.name, err)
				}
			}()
			if _, cluster := n.Node.(*redis.ClusterClient); cluster {
				err = errClusterTrustedByHand
				return
			}
			used[i], err = holdsLeaseKeys(ctx, n.Node)
			if used[i] || err != nil {
				return
			}
			// A Locker without the guard examines all the same, with a
			// guard of the moment: the marker it leaves is what the trust
			// must find again (no marker could come back after a flush).
			g := n.guard
			if g == nil {
				g = guard.New(guard.Config{MaxTTL: l.opts.MaxTTL, WaitReplicas: l.opts.WaitReplicas, Bound: l.bound, Clock: l.opts.Clock, Node: i})
			}
			if err = g.Warm(ctx, n.Node); err == nil {
				used[i] = !g.NeverWhole(l.opts.Clock.Now()) // the clock its examinations were read on
				var ok bool
				seen[i], ok = g.Seen()
				used[i] = used[i] || !ok
			}
		})
	}
	wg.Wait()
	if err := joinErrors(errs...); err != nil {
		return false, err
	}
	if slices.Contains(used, true) {
		return false, nil
	}
	// Each node is trusted only if its marker is still what the check
	// saw: a node that restarted, was flushed or failed over since (while
	// this program was paused, say, and another began to use the
	// deployment) keeps its quarantine.
	trusted := make([]bool, len(l.nodes))
	for i, n := range l.nodes {
		wg.Go(func() {
			var err error
			if l.opts.unsafe.UnconditionalTrust { // the control of the tests: trust what the check saw, changed or not
				trusted[i], err = true, guard.Trust(ctx, n.Node, l.opts.MaxTTL, l.opts.WaitReplicas)
			} else {
				trusted[i], err = guard.TrustIf(ctx, n.Node, l.opts.MaxTTL, l.opts.WaitReplicas, seen[i])
			}
			if err != nil {
				errs[i] = fmt.Errorf("redlock: TrustNewNodes: %s: %w", n.name, err)
				return
			}
			if n.guard != nil {
				errs[i] = n.guard.Forget(ctx, n.Node) // what it examined is stale either way
			}
		})
	}
	wg.Wait()
	if err := joinErrors(errs...); err != nil {
		return false, err
	}
	return !slices.Contains(trusted, false), nil
}

// maxKeysScanned bounds how many keys holdsLeaseKeys reads on a node: a
// node with more is in use.
const maxKeysScanned = 10_000

// holdsLeaseKeys reports whether node n holds a key that may be a lease:
// any key but the library's own bookkeeping (markers, fencing counters,
// tombstones, lines), or more keys than maxKeysScanned. A lease held now
// stands on the nodes that granted it and did not forget: whatever a
// Locker's MaxTTL makes of the nodes' ages, its key shows the deployment
// in use. (A server shared with other data is never new to TrustNewNodes.)
func holdsLeaseKeys(ctx context.Context, n Node) (bool, error) {
	type doer interface {
		Do(ctx context.Context, args ...any) *redis.Cmd
	}
	masters := []doer{n}
	if cc, ok := n.(*redis.ClusterClient); ok {
		masters = nil
		var mu sync.Mutex
		if err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			mu.Lock()
			masters = append(masters, c)
			mu.Unlock()
			return nil
		}); err != nil {
			return false, err
		}
	}
	scanned := 0
	for _, m := range masters {
		cursor := "0"
		for {
			res, err := m.Do(ctx, "SCAN", cursor, "COUNT", 1000).Slice()
			if err != nil {
				return false, reply.Denied("SCAN (TrustNewNodes looks for keys that may be leases)", err)
			}
			if len(res) != 2 {
				return false, fmt.Errorf("SCAN answered %d elements, not a cursor and a page", len(res))
			}
			next, _ := res[0].(string)
			page, _ := res[1].([]any)
			keys := make([]string, 0, len(page))
			for _, k := range page {
				if s, ok := k.(string); ok {
					keys = append(keys, s)
				}
			}
			for _, k := range keys {
				if _, reserved := reservedAs(k); !reserved {
					return true, nil
				}
			}
			if scanned += len(keys); scanned > maxKeysScanned {
				return true, nil
			}
			if cursor = next; cursor == "0" || cursor == "" {
				break
			}
		}
	}
	return false, nil
}
