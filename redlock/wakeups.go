package redlock

import (
	"context"
	"errors"
	mathrand "math/rand/v2"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/redlock/internal/notice"
	"github.com/redlock/redlock/redlock/internal/waitq"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// newNotices is the Locker's release notices (package notice): each node
// that is a go-redis client subscribes while some Lock waits, and a notice
// wakes the head of the key's queue (waitq.Queues.Notice) unless it named
// another Locker's turn; a release told again by its last nodes wakes it
// again (Queues.NoticeAgain), unless a lease here won the key since.
func newNotices(nodes []node, turns *waitq.Queues, timeout time.Duration, id string) *notice.Hub {
	sources := make([]notice.Source, len(nodes))
	for i, n := range nodes {
		sources[i] = notice.Subscribable(n.Node)
	}
	deliver := func(key string, turn notice.Turn, again bool) {
		named := waitq.NamedNobody
		switch turn {
		case notice.TurnThis:
			named = waitq.NamedThis
		case notice.TurnOther:
			named = waitq.NamedOther
		case notice.TurnShared:
			named = waitq.NamedSome
		}
		if again {
			turns.NoticeAgain(key, named)
			return
		}
		turns.Notice(key, named)
	}
	h := notice.New(sources, deliver, notice.Options{Timeout: max(timeout, time.Second), Majority: len(nodes)/2 + 1, ID: id})
	if h.Nodes() == 0 {
		return nil
	}
	return h
}

// lineTTL is how long a key's line of waiting Lockers lasts on a node
// after a Locker last joined it: a crashed process's place is dropped
// within it. A waiting Locker joins again (keeping its place) after a
// failed attempt once a third of it has passed.
const lineTTL = 30 * time.Second

// joinLine puts this Locker at the back of key's line on every node,
// unless it is in the line already (see package notice): a release then
// names it when its turn comes, and only its waiter tries. It does not
// wait for the replies: a join that is late or lost costs the turn, which
// the waiter's poll makes up for.
func (l *Locker) joinLine(key string) {
	line, ok := notice.Line(key)
	if !ok || l.opts.unsafe.NoLines { // the latter: a test's control
		return
	}
	c := wire.ScriptCommand(joinScript, []string{line}, l.id, lineTTL.Milliseconds())
	l.fanOut(context.Background(), fan{timeout: l.opts.NodeTimeout}, c, readLine)
}

// leaveLine takes this Locker out of key's line on every node: its last
// waiter gave up without a lease, and a turn named for it would be lost
// until the next waiter's poll.
func (l *Locker) leaveLine(key string) {
	line, ok := notice.Line(key)
	if !ok {
		return
	}
	c := wire.Command{Key: line, Args: []any{"lrem", line, 0, l.id}}
	l.fanOut(context.Background(), fan{timeout: l.opts.NodeTimeout}, c, readLine)
}

// readLine reads a join or a leave. A server's refusal (an ACL without the
// list commands, say) is an answer, not a failing node: the key's waiters
// then poll, as without notices.
func readLine(_ *ballot, _ int, cmd *redis.Cmd) (Outcome, error) {
	if err := cmd.Err(); err != nil {
		if errors.As(err, new(redis.Error)) {
			return Missing, nil
		}
		return Failed, err
	}
	return Granted, nil
}

// needHeard is how many nodes a waiter listens on before its attempt: as
// many as any majority's release must reach one of (n - majority + 1),
// where that many can subscribe.
func (l *Locker) needHeard() int {
	n := len(l.nodes)
	return min(n-(n/2+1)+1, l.notices.Nodes())
}

// stagger waits a random time below two of the majority's round trips
// (Health's RTT: the majority-th fastest node), before an attempt that a
// release elsewhere woke. It reports false if ctx ends first.
func (l *Locker) stagger(ctx context.Context) bool {
	window := min(drift.Mul(l.medianRTT(), 2), l.opts.NodeTimeout)
	if window <= 0 {
		return true
	}
	t := time.NewTimer(mathrand.N(window))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// medianRTT is the nodes' median recent round trip: a majority's, about.
func (l *Locker) medianRTT() time.Duration {
	rtts := make([]time.Duration, 0, len(l.nodes))
	for i := range l.nodes {
		s := l.nodes[i].stats
		s.mu.Lock()
		rtts = append(rtts, s.rtt)
		s.mu.Unlock()
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2]
}

// handOffWait is how long a Lock that comes just after this Locker's
// release named another Locker's turn (waitq's passed mark) waits in the
// line before its first attempt: long enough for the named Locker, woken
// by the release's notices, to send its attempt (four round trips to a
// majority, at least a millisecond), and no longer, in case it is gone
// (its place left in the line by a crash), and never past a poll.
func (l *Locker) handOffWait(poll time.Duration) time.Duration {
	return min(max(drift.Mul(l.medianRTT(), 4), time.Millisecond), poll)
}
