package redlock

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock/internal/wire"
)

// Leases handed to another goroutine or process (Lease.Handle,
// Locker.Resume).
//
// A job runner acquires, then hands the work to a worker process. What
// crosses is a Handle: the keys, the value and the fencing tokens, and the
// servers the lease lives on. Never a deadline: the acquiring process
// measures validity on its own monotonic clock, which means nothing in
// another process. The worker learns the validity left from the nodes
// instead: each reports how long the lease's keys have left (PTTL), and the
// lease is held until fewer than a majority hold it, so its validity is the
// majority's least PTTL (the Need-th longest), less the drift allowance on
// it, counted from before the round was sent (so the round trip is taken
// off too). A node that does not hold the value, or holds another, refutes
// the handle; a stale handle (the lease ran out, or was released) or a
// forged one (a value no node holds) fails with ErrNotHeld.

// Handle is a lease in a form another goroutine or process can resume
// (Locker.Resume): safe to serialize (as JSON, say), and holding no
// deadline. Whoever holds it can extend and release the lease: pass it as
// you would a credential.
type Handle struct {
	// Keys are the lease's keys, sorted and distinct, as Lease.Keys.
	Keys []string `json:"keys"`
	// Value is the lease's random value, which the nodes hold.
	Value string `json:"value"`
	// Tokens are the fencing tokens, one per key of Keys (Options.Fencing);
	// empty without fencing.
	Tokens []uint64 `json:"tokens,omitempty"`
	// Nodes names the servers the lease lives on, sorted: their network
	// and address (nodes that report none, such as Sentinel-managed
	// clients, by their place among the Locker's nodes). Resume refuses a
	// handle on a Locker over other servers.
	Nodes []string `json:"nodes"`
	// Seal binds the fields above to each other: Resume refuses a handle
	// whose seal does not match them (one altered, or assembled from the
	// parts of several, such as some of a multi-key lease's keys, which
	// would release those alone, or another lease's tokens). It is a
	// checksum, not a signature: whoever has the value can make one, and
	// whoever has the value holds the lease anyway.
	Seal string `json:"seal"`
}

// seal is h's Seal: SHA-256 of its fields, each length-prefixed, the
// first 16 bytes in hex.
func (h Handle) seal() string {
	d := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		d.Write(n[:])
		d.Write([]byte(s))
	}
	field("redlock handle 1")
	field(h.Value)
	for _, list := range [][]string{h.Keys, h.Nodes} {
		field(strconv.Itoa(len(list)))
		for _, s := range list {
			field(s)
		}
	}
	field(strconv.Itoa(len(h.Tokens)))
	for _, t := range h.Tokens {
		field(strconv.FormatUint(t, 10))
	}
	return hex.EncodeToString(d.Sum(nil)[:16])
}

// Handle returns the lease as another goroutine or process resumes it with
// Locker.Resume. The lease stays usable here too: both copies act on the
// same keys, and each Extend, Check and Unlock is the nodes' word, so hand a
// lease over and stop using it, rather than share it.
//
// A copy resumed by the same Locker releases the lease on each node only
// after this copy's calls still in flight there (a straggling extension,
// which would set the key again after the release). A copy resumed by
// another Locker cannot be ordered after them: hand the lease over once
// they have returned (Locker.Drain), or a straggler that reaches a node
// after the release leaves the key there, unheld, until its TTL.
func (l *Lease) Handle() Handle {
	if l.holdsNothing() {
		return Handle{}
	}
	h := Handle{Keys: l.Keys(), Value: l.value, Nodes: slices.Clone(l.locker.servers)}
	// A one-key lease whose token is 0 (its counter read 0 on a node
	// labelled 0: an operator's -1 left there) hands over as unfenced:
	// Resume takes a token of 0 for one never issued.
	if len(l.tokens) > 1 || len(l.tokens) == 1 && l.tokens[0] != 0 {
		h.Tokens = slices.Clone(l.tokens)
	}
	h.Seal = h.seal()
	return h
}

// Resume returns the lease that h describes, taken from another goroutine or
// process (Lease.Handle), with its validity learned from the nodes: the
// least time left on a majority of them, less the drift allowance and the
// round trip. The lease can be extended, checked, unlocked and run under
// Do (Lease.Do) as if this Locker had acquired it. A handle whose lease has
// run out, was released or revoked, or was never granted (a forged value)
// fails with ErrNotHeld; one of a lease on other servers with
// ErrOtherNodes. Resume waits for the nodes as Check does (at most
// NodeTimeout) and changes nothing on them.
func (l *Locker) Resume(ctx context.Context, h Handle) (*Lease, error) {
	if err := l.made("Resume"); err != nil {
		return nil, err
	}
	req, err := l.resumeRequest(ctx, h)
	if err != nil {
		return nil, err
	}
	name := req.describe()
	width := max(len(req.multi), 1)
	keys := []string{req.key}
	if req.multi != nil {
		keys = req.multi
	}
	var counters []uint64
	if len(h.Tokens) > 0 { // the script reads the keys' counters too, after the keys
		counters = make([]uint64, len(l.nodes)*width)
		withCounters := make([]string, 0, 2*width)
		withCounters = append(withCounters, keys...)
		for _, k := range keys {
			ck, err := counterKey(k)
			if err != nil {
				return nil, fmt.Errorf("redlock: resume %s: %w", name, err)
			}
			withCounters = append(withCounters, ck)
		}
		keys = withCounters
	}
	c := wire.ScriptCommand(resumeScript, keys, h.Value, width).GuardedBy()
	if req.multi != nil {
		c = c.Across(width)
	}
	found := make([]holding, len(l.nodes))
	start := l.opts.Clock.Now()
	timing := l.timing()
	round := l.fanOut(ctx, fan{timeout: l.opts.NodeTimeout, value: h.Value, counters: counters, found: found, timing: timing}, c, readResume)
	tally := round.Decide(ctx, l.opts.NodeTimeout, granted)
	if !tally.Won {
		err = l.roundError(ctx, "resume", c, tally, timing)
	}
	var lease *Lease
	if err == nil {
		lease, err = l.resumed(h, &attemptRound{req: req, value: h.Value, start: start, cmd: c, round: round, tally: tally, counters: counters}, found)
	}
	if timing != nil {
		e := Event{Op: OpResume, Key: req.key, Duration: l.opts.Clock.Now().Sub(start), Err: err, Nodes: l.nodeResultsOf(err, tally, timing)}
		if lease != nil {
			e.Token, e.Validity = lease.Token(), lease.Validity()
		}
		l.emit(e)
	}
	return lease, err
}

// resumed makes the lease of h from its won resume round r, in which the
// nodes told what they hold (found): its validity from the majority's
// least time left, its tokens checked against the counters.
func (l *Locker) resumed(h Handle, r *attemptRound, found []holding) (*Lease, error) {
	req, round, tally, counters, start := r.req, r.round, r.tally, r.counters, r.start
	name := req.describe()
	var left []time.Duration
	longest := time.Duration(0)
	for i, v := range tally.Votes {
		if !v.Accepted {
			continue
		}
		ttl := found[i].ttl
		if ttl < 0 {
			ttl = l.opts.MaxTTL // no expiry: it lives at least as long as any lease may
		}
		left = append(left, ttl)
		longest = max(longest, ttl)
	}
	slices.Sort(left)
	slices.Reverse(left)
	held := left[tally.Need-1] // the majority's least: fewer hold it once this runs out
	until := start.Add(held - l.bound.Of(held) - l.fastClocks(tally, held))
	if !until.After(l.opts.Clock.Now()) {
		return nil, fmt.Errorf("redlock: resume %s: %w: no validity left (a majority holds it for %v more, within the drift allowance)", name, ErrNotHeld, held)
	}
	width := max(len(req.multi), 1)
	if counters != nil {
		for k, token := range h.Tokens {
			var most uint64
			for i, v := range tally.Votes {
				if v.Accepted {
					most = max(most, counters[i*width+k])
				}
			}
			if t, label := token>>tokenNodeBits, token&(maxFencingNodes-1); t > most || label >= uint64(len(l.nodes)) {
				return nil, fmt.Errorf("redlock: resume %s: %w: token %d of key %q was never issued (the nodes' counter is %d)", name, ErrNotHeld, token, h.Keys[k], most)
			}
		}
	}
	lease := &Lease{locker: l, value: h.Value, acquiredAt: start, acquired: round, heldBy: round, holders: round, ttl: longest, span: held, until: until}
	var token uint64
	var tokens []uint64
	switch {
	case len(h.Tokens) > 1:
		tokens = slices.Clone(h.Tokens)
	case len(h.Tokens) == 1:
		token = h.Tokens[0]
	}
	lease.hold(req.key, req.multi, len(h.Tokens) > 0, token, tokens)
	return lease, nil
}

// resumeRequest validates a handle: a context, keys as Handle gives them
// (sorted, distinct, each a valid key; one Redis Cluster slot), a value,
// tokens one per key if any, and this Locker's servers.
func (l *Locker) resumeRequest(ctx context.Context, h Handle) (request, error) {
	if ctx == nil {
		return request{}, errors.New("redlock: resume: nil context")
	}
	switch {
	case len(h.Keys) == 0:
		return request{}, errors.New("redlock: resume: the handle has no keys")
	case h.Value == "":
		return request{}, fmt.Errorf("redlock: resume %q: the handle has no value", h.Keys[0])
	case !slices.IsSorted(h.Keys) || len(slices.Compact(slices.Clone(h.Keys))) != len(h.Keys):
		return request{}, fmt.Errorf("redlock: resume: the handle's keys %v are not sorted and distinct, as Lease.Handle gives them", h.Keys)
	case len(h.Tokens) != 0 && len(h.Tokens) != len(h.Keys):
		return request{}, fmt.Errorf("redlock: resume: the handle has %d tokens for %d keys", len(h.Tokens), len(h.Keys))
	case !slices.Equal(h.Nodes, l.servers):
		return request{}, fmt.Errorf("%w: the handle names %v, this Locker %v", ErrOtherNodes, h.Nodes, l.servers)
	}
	if err := ctx.Err(); err != nil {
		return request{}, fmt.Errorf("redlock: resume: %w", contextError(ctx))
	}
	// The keys are validated as an acquisition's (the TTL does not
	// matter here).
	req, err := l.multiRequest(ctx, "resume", h.Keys, l.opts.MaxTTL)
	switch {
	case err != nil:
		return request{}, err
	case h.Seal != h.seal():
		return request{}, fmt.Errorf("redlock: resume %s: %w: the handle's seal does not match its keys, value, tokens and nodes (altered, or assembled from parts of several handles)", req.describe(), ErrNotHeld)
	case slices.Contains(h.Tokens, 0):
		return request{}, fmt.Errorf("redlock: resume %s: %w: token 0 is never issued", req.describe(), ErrNotHeld)
	}
	return req, nil
}

// readResume reads the resume script's reply: the least time node i's
// keys have left into b.found[i], their fencing counters, where asked, into
// b.counters.
func readResume(b *ballot, i int, cmd *redis.Cmd) (Outcome, error) {
	res, err := cmd.Slice()
	if err != nil {
		return Failed, err
	}
	if len(res) == 0 {
		return Failed, fmt.Errorf("redlock: unexpected resume reply %v", res)
	}
	switch code, _ := res[0].(int64); code {
	case 0:
		return Missing, nil
	case -1:
		return Taken, nil
	case 1:
	default:
		return Failed, fmt.Errorf("redlock: unexpected resume reply %v", res)
	}
	width := 0
	if b.counters != nil {
		width = len(b.counters) / len(b.nodes)
	}
	if len(res) != 2+width {
		return Failed, fmt.Errorf("redlock: unexpected resume reply %v", res)
	}
	ms, _ := res[1].(int64)
	b.found[i] = holding{held: true, value: b.value, ttl: pttl(ms)}
	for k := range width {
		s, _ := res[2+k].(string)
		c, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Failed, fmt.Errorf("redlock: fencing counter %q on the node is not usable", s)
		}
		b.counters[i*width+k] = c
	}
	return Granted, nil
}
