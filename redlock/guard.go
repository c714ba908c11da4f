package redlock

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock/internal/guard"
)

// The coordinator's side of the node guard (internal/guard is the guard
// itself: the markers, the examinations, the quarantines): what a
// QuorumError says of a quarantine and how to lift it (lastKnown,
// trustRemedy), and what an Observer is told of each node's verdicts
// (nodeWatch). Trusting nodes by hand or when new is in trust.go.

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
