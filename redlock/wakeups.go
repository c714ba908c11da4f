package redlock

import (
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
	h := notice.New(sources, turns.Notice, notice.Options{Timeout: max(timeout, time.Second)})
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
