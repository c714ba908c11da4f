package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redlock/redlock/redlock/internal/guard"
)

// ErrNodeQuarantined matches the vote of a node that the node guard keeps
// out of the quorum for now: its memory began less than Options.MaxTTL ago,
// so a key it granted before may still be held by someone, or its clock
// jumped forward less than MaxTTL ago, so a key it granted before the jump
// may have expired early. The *QuorumError names the node, the cause and
// how long is left. The guard itself, and why it works as it does, is in
// internal/guard.
var ErrNodeQuarantined = guard.ErrNodeQuarantined

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
	return errors.Join(errs...)
}
