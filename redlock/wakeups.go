package redlock

import (
	"context"
	mathrand "math/rand/v2"
	"slices"
	"time"

	"github.com/redlock/redlock/redlock/internal/notice"
	"github.com/redlock/redlock/redlock/internal/waitq"
)

// newNotices is the Locker's release notices (package notice): each node
// that is a go-redis client subscribes while some Lock waits, and a notice
// wakes the head of the key's queue (waitq.Queues.Notice).
func newNotices(nodes []node, turns *waitq.Queues, timeout time.Duration) *notice.Hub {
	sources := make([]notice.Source, len(nodes))
	for i, n := range nodes {
		sources[i] = notice.Subscribable(n.Node)
	}
	h := notice.New(sources, turns.Notice, notice.Options{Timeout: max(timeout, time.Second), Majority: len(nodes)/2 + 1})
	if h.Nodes() == 0 {
		return nil
	}
	return h
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
	rtts := make([]time.Duration, 0, len(l.nodes))
	for i := range l.nodes {
		s := l.nodes[i].stats
		s.mu.Lock()
		rtts = append(rtts, s.rtt)
		s.mu.Unlock()
	}
	slices.Sort(rtts)
	window := min(2*rtts[len(rtts)/2], l.opts.NodeTimeout)
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
