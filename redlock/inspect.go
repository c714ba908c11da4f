package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// Inspection is what every node holds for one lock, as Inspect read it: the
// operator's answer to "who holds this key, and for how long?".
type Inspection struct {
	Key string
	// Holder is the value a majority of the nodes hold, "" where none
	// does: the lease that holds the lock now (Lease.Value). Owner is its
	// owner label (OwnerOf), "" for a Locker without Options.Owner.
	Holder string
	Owner  string
	// Token is the holder's fencing token, the one its Lease.Token reports
	// (with Options.Fencing): t<<8 | the label of the node whose counter
	// gave t, which the holder's acquisition recorded on the nodes that
	// granted it. 0 without a Holder, for a lease without fencing, and
	// while the record has not reached a node yet (it is sent just after
	// the acquisition is decided).
	Token uint64
	// HeldFor is how long a majority keeps Holder's value without another
	// extension, as the nodes count it: the smallest TTL among the majority
	// whose keys last longest. Negative where a majority's keys have no
	// expiry (not a lease of this library's), 0 without a Holder.
	HeldFor time.Duration
	// Nodes is each node's answer, in the order given to New.
	Nodes []NodeHolding
}

// NodeHolding is what one node holds for a lock.
type NodeHolding struct {
	Node int    // index in the nodes passed to New
	Name string // as errors name it
	// Held reports whether the key exists on the node, Value what it holds
	// and Owner the value's owner label (OwnerOf), TTL what the key has left
	// (negative: no expiry).
	Held  bool
	Value string
	Owner string
	TTL   time.Duration
	// Counter is the key's fencing counter on the node (0: none yet); the
	// tokens of the key's next fenced acquisitions are built on a counter
	// above the largest on a majority (see Options.Fencing).
	Counter uint64
	// Token is the fencing token recorded on the node for the value it
	// holds (0: none): the token its holder's Lease.Token reports.
	Token uint64
	// Revoked is a value Revoke deleted on the node whose tombstone is
	// still there (the latest, where it keeps several): its holder's next
	// extension is refused.
	Revoked string
	// QuarantineLeft and QuarantineCause are the node guard's state, as
	// this Locker knows it (see NodeHealth): while it lasts, the node's
	// votes do not count, whatever it holds.
	QuarantineLeft  time.Duration
	QuarantineCause string
	Latency         time.Duration // the round trip of the inspection
	Err             error         // why the node could not be read; the other fields are then unset
}

// Inspect reads, on every node, what it holds for key: the value and its
// owner label, the time left, the fencing counter and the holder's token
// (Inspection.Token), and a revoked value's tombstone, with the node
// guard's state as this Locker knows it. It waits
// for every node, each for at most NodeTimeout, and changes nothing; it
// reads the masters, not their replicas. The error is for a call that could
// not be made (a nil context, an invalid key); a node that could not be
// read says why in its NodeHolding.
//
// The reading is a snapshot: each node answers at its own moment, so a
// lease acquired, extended or released meanwhile may show on some nodes and
// not others. Inspect on a Locker of the same nodes as the application's
// (the operator command does so); a lease's value is not a secret worth
// keeping from an operator, but it is what Revoke targets.
func (l *Locker) Inspect(ctx context.Context, key string) (Inspection, error) {
	if err := l.made("Inspect"); err != nil {
		return Inspection{}, err
	}
	if err := checkKey(ctx, "inspect", key); err != nil {
		return Inspection{}, err
	}
	if ctx.Err() != nil {
		return Inspection{}, fmt.Errorf("redlock: inspect %q: %w", key, contextError(ctx))
	}
	keys := []string{key}
	if counter, tomb, err := auxiliaryKeys(key); err == nil {
		record, _ := tokenRecordKey(key) // as the others: the key takes a hash tag
		keys = append(keys, counter, tomb, record)
	}
	// Guarded, so that the node guard examines each node as it reads it:
	// a Locker that has sent nothing yet (the operator command's) learns
	// the quarantine that the nodes' markers say.
	c := wire.ScriptCommand(inspectScript, keys).GuardedBy()
	found := make([]holding, len(l.nodes))
	timing := newLatencies(len(l.nodes))
	round := l.fanOut(ctx, fan{timeout: l.opts.NodeTimeout, found: found, timing: timing}, c, readInspect)
	tally := round.Collect(ctx, l.opts.NodeTimeout, granted)
	now := l.opts.Clock.Now()
	in := Inspection{Key: key, Nodes: make([]NodeHolding, len(l.nodes))}
	for i, v := range tally.Votes {
		n := NodeHolding{Node: i, Name: l.nodes[i].name, Latency: timing.of(i)}
		n.QuarantineLeft, n.QuarantineCause = l.nodes[i].quarantine(now)
		// A quarantined node's reading is still what it holds: its state
		// is in QuarantineLeft.
		if v.Err != nil && !(v.Replied && errors.Is(v.Err, ErrNodeQuarantined)) {
			n.Err = explainDenied(c, v.Err)
		} else {
			f := found[i]
			n.Held, n.Value, n.Owner, n.TTL, n.Counter, n.Revoked = f.held, f.value, OwnerOf(f.value), f.ttl, f.counter, f.revoked
			if f.held && f.recordedFor == f.value {
				n.Token = f.token
			}
		}
		in.Nodes[i] = n
	}
	if l.observed() {
		l.reportNodes(0, key, round, tally, true)
	}
	in.Holder, in.HeldFor = majorityHolder(in.Nodes, tally.Need)
	in.Owner = OwnerOf(in.Holder)
	for _, n := range in.Nodes {
		if in.Holder != "" && n.Value == in.Holder && n.Token != 0 {
			in.Token = n.Token // one acquisition records one token
			break
		}
	}
	return in, nil
}

// majorityHolder is the value held on at least need nodes, if any, and how
// long need of them keep it: the need-th longest TTL (negative TTLs, no
// expiry, count as the longest).
func majorityHolder(nodes []NodeHolding, need int) (string, time.Duration) {
	counts := map[string]int{}
	for _, n := range nodes {
		if n.Err == nil && n.Held {
			counts[n.Value]++
		}
	}
	for value, count := range counts {
		if count < need {
			continue
		}
		var ttls []time.Duration
		for _, n := range nodes {
			if n.Err == nil && n.Held && n.Value == value {
				ttls = append(ttls, n.TTL)
			}
		}
		longest := func(d time.Duration) time.Duration {
			if d < 0 {
				return math.MaxInt64 // no expiry
			}
			return d
		}
		slices.SortFunc(ttls, func(a, b time.Duration) int { return cmp.Compare(longest(b), longest(a)) })
		if held := ttls[need-1]; held >= 0 {
			return value, held
		}
		return value, -1
	}
	return "", 0
}

// holding is what one node answered to an operator's round.
type holding struct {
	held    bool
	value   string
	ttl     time.Duration
	counter uint64
	revoked string
	// token and recordedFor: the token record, and the value it was
	// recorded for
	token       uint64
	recordedFor string
}

// readInspect reads the inspect script's reply into b.found[i].
func readInspect(b *ballot, i int, cmd *redis.Cmd) (Outcome, error) {
	r, err := cmd.Slice()
	if err != nil {
		return Failed, err
	}
	if len(r) != 5 {
		return Failed, fmt.Errorf("redlock: unexpected inspect reply %v", r)
	}
	var h holding
	var ok bool
	if r[0] != nil {
		if h.value, ok = r[0].(string); !ok {
			return Failed, fmt.Errorf("redlock: unexpected inspect reply %v", r)
		}
		h.held = true
	}
	ms, ok := r[1].(int64)
	if !ok {
		return Failed, fmt.Errorf("redlock: unexpected inspect reply %v", r)
	}
	h.ttl = pttl(ms)
	if s, ok := r[2].(string); ok {
		if h.counter, err = strconv.ParseUint(s, 10, 64); err != nil {
			return Failed, fmt.Errorf("redlock: the key's fencing counter on the node is not a number: %q", s)
		}
	}
	if revoked, ok := r[3].(string); ok {
		// the latest of the values revoked, one a line (see revoke.lua)
		h.revoked = revoked[strings.LastIndexByte(revoked, '\n')+1:]
	}
	if record, ok := r[4].(string); ok {
		tok, value, found := strings.Cut(record, " ")
		if h.token, err = strconv.ParseUint(tok, 10, 64); err != nil || !found {
			return Failed, fmt.Errorf("redlock: the key's fencing token record on the node is not a token and a value: %q", record)
		}
		h.recordedFor = value
	}
	b.found[i] = h
	if !h.held {
		return Missing, nil
	}
	return Granted, nil
}

// pttl is a PTTL reply as a duration: negative for no expiry (-1), 0 for a
// key that does not exist (-2).
func pttl(ms int64) time.Duration {
	switch {
	case ms == -1:
		return -1
	case ms < 0:
		return 0
	}
	return drift.Mul(time.Millisecond, ms) // a PTTL of 292 years or more is the longest Duration
}

// collected is the error of an operator's round for the nodes that did not
// answer, or nil.
func collected(op, key string, c wire.Command, tally quorum.Tally[Outcome], nodes []node) error {
	var failed []error
	for i, v := range tally.Votes {
		if v.Err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", nodes[i].name, explainDenied(c, v.Err)))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("redlock: %s %q: %d of %d nodes failed: %w", op, key, len(failed), len(nodes), joinErrors(failed...))
}
