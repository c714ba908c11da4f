package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock/internal/guard"
	"github.com/redlock/redlock/redlock/internal/reply"
)

// The coordinator's side of the node guard (internal/guard is the guard
// itself: the markers, the examinations, the quarantines): trusting nodes
// by hand or when new (TrustNodes, TrustNewNodes), what a QuorumError says
// of a quarantine and how to lift it (lastKnown, trustRemedy), and what an
// Observer is told of each node's verdicts (nodeWatch).

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

// lastKnown gives each node of e that the round was decided without what
// the node guard last knew of it for key: a quarantine that would have
// kept its vote out anyway, so that the error says what every node is
// (nothing is sent to learn it).
func (l *Locker) lastKnown(e *QuorumError, key string) {
	now := time.Now()
	for i := range e.Nodes {
		n := &e.Nodes[i]
		if n.Outcome != Unanswered || n.Err != nil || n.Node >= len(l.nodes) || l.nodes[n.Node].guard == nil {
			continue
		}
		if q := l.nodes[n.Node].guard.CurrentFor(key, now); q != nil {
			n.Err = q
		}
	}
}

// trustRemedy is what to run when some of nodes are quarantined because
// their memory began recently: on servers new to the deployment the wait
// is needless, and only the operator can say they are new (a server that
// restarted empty looks the same to the guard, and must wait). "" when no
// node is quarantined that way.
func (l *Locker) trustRemedy(nodes []NodeResult) string {
	forgot := false
	var jumped []string // nodes whose clock jumped: a trust leaves them out
	for _, n := range nodes {
		var q *QuarantineError
		switch {
		case n.Outcome == Taken || n.Outcome == Revoked:
			return "" // a node holds a lease: the deployment is in use, and trusting would lift a forgetful node's quarantine
		case errors.As(n.Err, &q):
			forgot = forgot || q.Forgot
			if q.JumpLeft > 0 {
				jumped = append(jumped, fmt.Sprintf("%s for %v more", n.Name, q.JumpLeft.Round(time.Millisecond)))
			}
		}
	}
	if !forgot {
		return ""
	}
	after := ""
	if len(jumped) > 0 {
		after = "; a trust does not lift a clock jump's quarantine: " + strings.Join(jumped, ", ") + " stay out after it"
	}
	addrs := make([]string, 0, len(l.nodes))
	for _, n := range l.nodes {
		c, ok := n.Node.(interface{ Options() *redis.Options })
		if !ok || c.Options().Addr == failoverAddr {
			addrs = nil
			break
		}
		addrs = append(addrs, adminAddr(c.Options()))
	}
	list := "HOST:PORT,... (every node)"
	if addrs != nil {
		list = strings.Join(addrs, ",")
	}
	return "if these servers are new to the deployment and hold no locks, trust them once: redlock-admin -nodes " + list +
		" trust -yes (or Locker.TrustNodes); a server that restarted empty must wait it out (docs/operations.md)" + after
}

// adminAddr names a node as redlock-admin's -nodes takes it: host:port for
// database 0 over plain TCP, else a URL that carries the scheme (rediss://,
// unix://) and the database. (Credentials and TLS files stay the
// operator's to give, by flags.)
func adminAddr(o *redis.Options) string {
	switch {
	case o.Network == "unix":
		return fmt.Sprintf("unix://%s?db=%d", o.Addr, o.DB)
	case o.TLSConfig != nil:
		return fmt.Sprintf("rediss://%s/%d", o.Addr, o.DB)
	case o.DB != 0:
		return fmt.Sprintf("redis://%s/%d", o.Addr, o.DB)
	}
	return o.Addr
}

// nodeWatch is what an observed Locker has reported of one guarded node:
// whether its votes were kept out of the quorum, and the clock alarms seen.
// The transport records each guarded reply's verdict (verdict, from
// ballot.Receive: an atomic store, never a call to the Observer, which must
// not run under a pipeline's lock); the operation that decided the round
// reports what changed (Locker.reportNodes).
type nodeWatch struct {
	last atomic.Pointer[guard.QuarantineError] // the newest guarded verdict: nil sound, else the quarantine
	seen atomic.Bool                           // a guarded verdict has been recorded

	// What was last reported, written under mu (which serializes reports,
	// so that each change is told once) and read without it by changed,
	// on every observed acquisition.
	mu          sync.Mutex
	quarantined atomic.Bool  // as last reported
	jumps       atomic.Int64 // clock jumps reported
	fast        atomic.Bool  // runs faster than the bound, as last reported
}

// changed reports whether n may have something to report since the last
// report: changes' test without its lock.
func (w *nodeWatch) changed(n *node) bool {
	if w.seen.Load() && (w.last.Load() != nil) != w.quarantined.Load() {
		return true
	}
	if c := n.guard.Clock(); c != nil {
		return int64(c.Jumps()) > w.jumps.Load() || (n.guard.Excess() > 0) != w.fast.Load()
	}
	return false
}

// verdict records a guarded reply's verdict: sound (nil), a quarantine, or
// another error (the guard could not judge: nothing learnt of the
// quarantine).
func (w *nodeWatch) verdict(err error) {
	if w == nil {
		return
	}
	if err == nil {
		w.last.Store(nil)
		w.seen.Store(true)
		return
	}
	var q *guard.QuarantineError // escapes to errors.As: declared only where needed
	if !errors.As(err, &q) {
		return
	}
	w.last.Store(q)
	w.seen.Store(true)
}

// changes returns the events of what changed on n since the last report.
func (w *nodeWatch) changes(n *node, key string) []Event {
	if !w.changed(n) {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var events []Event
	one := func(err error) []NodeResult {
		return []NodeResult{{Node: n.index, Name: n.name, Outcome: Failed, Err: err}}
	}
	if w.seen.Load() {
		q := w.last.Load()
		switch {
		case q != nil && !w.quarantined.Load():
			w.quarantined.Store(true)
			events = append(events, Event{Op: OpQuarantine, Key: key, Err: q, Nodes: one(q), Detail: fmt.Sprintf("%s: %s", n.name, q.Cause)})
		case q == nil && w.quarantined.Load():
			w.quarantined.Store(false)
			r := one(nil)
			r[0].Outcome = Granted
			events = append(events, Event{Op: OpQuarantineEnd, Key: key, Nodes: r, Detail: n.name + ": its votes count again"})
		}
	}
	if c := n.guard.Clock(); c != nil {
		if j := c.Jumps(); int64(j) > w.jumps.Load() {
			events = append(events, Event{Op: OpClockAlarm, Key: key, Nodes: one(nil), Detail: fmt.Sprintf("%s: its clock jumped (%d jump(s) seen in all)", n.name, j)})
			w.jumps.Store(int64(j))
		}
		excess := n.guard.Excess()
		if fast := excess > 0; fast != w.fast.Load() {
			w.fast.Store(fast)
			if fast {
				ppm, errPPM, _ := c.Rate()
				events = append(events, Event{Op: OpClockAlarm, Key: key, Nodes: one(nil), Detail: fmt.Sprintf("%s: its clock runs fast by %.0f±%.0f ppm, beyond the drift bound: validity shrinks by %.3g%% of the TTL", n.name, ppm, errPPM, excess*100)})
			}
		}
	}
	return events
}

// quarantine is how long the node guard keeps n's votes out of the quorum
// from now (0: they count), and why. It costs no round trip.
func (n node) quarantine(now time.Time) (left time.Duration, cause string) {
	if n.guard == nil {
		return 0, ""
	}
	var q *guard.QuarantineError
	if err := n.guard.Current(now); errors.As(err, &q) {
		return q.Left, q.Cause
	}
	return 0, ""
}
