package redlock

import (
	"context"
	"sync"
)

// tracker counts calls in flight, for Locker.Drain.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to zero
}

func (t *tracker) add(k int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n += k
}

func (t *tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 {
		close(t.idle)
	}
}

// wait returns once the count is zero, or with ctx's error.
func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	idle := t.idle
	t.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
