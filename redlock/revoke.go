package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// Revocation is what Revoke deleted on each node.
type Revocation struct {
	Key   string
	Nodes []RevokedNode // in the order given to New
}

// RevokedNode is what Revoke did on one node.
type RevokedNode struct {
	Node int    // index in the nodes passed to New
	Name string // as errors name it
	// Deleted reports whether the key existed and was deleted; Value is the
	// value it held, Owner that value's owner label (OwnerOf), and TTL what
	// it had left (negative: no expiry).
	Deleted bool
	Value   string
	Owner   string
	TTL     time.Duration
	Err     error // why the node could not be reached or refused; the key may still be there
}

// Holders returns the distinct values Revoke deleted, in node order.
func (r Revocation) Holders() []string {
	var values []string
	for _, n := range r.Nodes {
		if n.Deleted && !slices.Contains(values, n.Value) {
			values = append(values, n.Value)
		}
	}
	return values
}

// Revoke is an operator's forced release of key: it deletes the key on
// every node whatever value it holds, and leaves on each a tombstone of the
// value deleted, which lasts MaxTTL and twice NodeTimeout (see
// tombstoneLife), or as long as the key had left, if longer. The holder
// learns of it at its next extension or check:
// the nodes answer that the lease was revoked (Outcome Revoked) instead of
// healing the key back (see Options.NoHeal), so Extend returns ErrNotHeld,
// the lease is lost, and Do cancels its function's context and returns
// ErrLost. Until then the holder may still act: with Options.Fencing, the
// next holder's token is higher than the revoked one's, and a resource that
// checks tokens (package fence) turns the old holder away.
//
// Revoke waits for every node, each for at most NodeTimeout. The error is
// nil when every node answered; otherwise it names the nodes that did not,
// where the key may still be held until it expires. So may a node that
// answered before a grant still on its way to it (an acquisition's SET that
// timed out on the client, or that its decision did not wait for) ran
// there: it sets the key on that node alone, which expires by its TTL, and
// the lease it belongs to is revoked on the others. An OpRevoke event tells
// the Observer who revoked (Options.Owner) and which values were deleted.
//
// Revoke is for incidents, not for the normal flow: the lease it deletes
// may be protecting work in progress. A key that contains '}' but no {tag}
// cannot carry a tombstone (see Options.Fencing on such keys): it is
// deleted, and the error says a healing holder may set it again.
func (l *Locker) Revoke(ctx context.Context, key string) (Revocation, error) {
	if err := l.made("Revoke"); err != nil {
		return Revocation{}, err
	}
	if err := checkKey(ctx, "revoke", key); err != nil {
		return Revocation{}, err
	}
	if ctx.Err() != nil {
		return Revocation{}, fmt.Errorf("redlock: revoke %q: %w", key, contextError(ctx))
	}
	keys := []string{key}
	_, tomb, tagErr := auxiliaryKeys(key)
	if tagErr == nil {
		keys = append(keys, tomb)
	}
	start := l.opts.Clock.Now()
	c := wire.ScriptCommand(revokeScript, keys, l.tombstoneLife().Milliseconds())
	found := make([]holding, len(l.nodes))
	timing := newLatencies(len(l.nodes))
	round := l.fanOut(ctx, fan{timeout: l.opts.NodeTimeout, found: found, timing: timing}, c, readRevoke)
	tally := round.Collect(ctx, l.opts.NodeTimeout, granted)
	rev := Revocation{Key: key, Nodes: make([]RevokedNode, len(l.nodes))}
	for i, v := range tally.Votes {
		n := RevokedNode{Node: i, Name: l.nodes[i].name}
		if v.Err != nil {
			n.Err = explainDenied(c, v.Err)
		} else {
			f := found[i]
			n.Deleted, n.Value, n.Owner, n.TTL = f.held, f.value, OwnerOf(f.value), f.ttl
		}
		rev.Nodes[i] = n
	}
	err := collected("revoke", key, c, tally, l.nodes)
	if tagErr != nil {
		err = joinErrors(err, fmt.Errorf("redlock: revoke %q: deleted, but no tombstone could be left (%w): a holder whose extension heals the key may set it again", key, tagErr))
	}
	if l.observed() {
		l.emit(Event{Op: OpRevoke, Key: key, Duration: l.opts.Clock.Now().Sub(start), Err: err, Nodes: l.results(tally, timing, func(e error) error { return explainDenied(c, e) }), Detail: rev.describe(l.opts.Owner)})
	}
	return rev, err
}

// tombstoneLife is how long a revocation's tombstone lasts on a node at
// least: past every extension the revoked holder may still send, so that
// none heals the key back. The invariant: the holder's extensions reach
// each node while its tombstone is there. Not as long as the key had left
// on the node: a node that missed the holder's last extensions (slow, or
// one still on its way) has less left than the lease's validity, and the
// holder, unaware of the revocation, extends until it finds it.
//
// Each extension is sent while the holder's validity lasts, and reaches
// the node within a NodeTimeout or its call has given up (a command that a
// node runs after that is not covered, as a release's is not: see
// docs/failure-models.md). Validity is set by rounds that won, and none
// wins once a majority holds tombstones: the last began before the
// revocation reached its last node, within a NodeTimeout of reaching this
// one, and carried the validity at most MaxTTL past its start. So every
// extension reaches this node within MaxTTL and two NodeTimeouts of the
// tombstone; the drift allowance taken off the validity covers a node
// clock that runs fast. This holds for holders whose MaxTTL and
// NodeTimeout are no longer than this Locker's: give every Locker of a
// deployment the same (see Options.MaxTTL). A key with more time left
// than that (set by a Locker with a longer MaxTTL) keeps its tombstone as
// long as the key had left.
func (l *Locker) tombstoneLife() time.Duration {
	return drift.Add(l.opts.MaxTTL, drift.Mul(l.opts.NodeTimeout, 2))
}

// describe says, for OpRevoke's Detail, who revoked and what was deleted.
func (r Revocation) describe(by string) string {
	if by == "" {
		by = "a Locker with no Options.Owner"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "revoked by %s", by)
	holders := r.Holders()
	if len(holders) == 0 {
		b.WriteString(": no node held the key")
		return b.String()
	}
	b.WriteString(": deleted ")
	for i, v := range holders {
		if i > 0 {
			b.WriteString(", ")
		}
		on := 0
		for _, n := range r.Nodes {
			if n.Deleted && n.Value == v {
				on++
			}
		}
		fmt.Fprintf(&b, "%q on %d of %d nodes", v, on, len(r.Nodes))
	}
	return b.String()
}

// readRevoke reads the revoke script's reply into b.found[i]: Granted when
// it deleted a value, Missing when there was none.
func readRevoke(b *ballot, i int, cmd *redis.Cmd) (Outcome, error) {
	r, err := cmd.Slice()
	if err != nil {
		return Failed, err
	}
	if len(r) == 1 && r[0] == int64(0) {
		return Missing, nil
	}
	if len(r) != 3 || r[0] != int64(1) {
		return Failed, fmt.Errorf("redlock: unexpected revoke reply %v", r)
	}
	value, ok := r[1].(string)
	ms, ok2 := r[2].(int64)
	if !ok || !ok2 {
		return Failed, fmt.Errorf("redlock: unexpected revoke reply %v", r)
	}
	b.found[i] = holding{held: true, value: value, ttl: pttl(ms)}
	return Granted, nil
}
