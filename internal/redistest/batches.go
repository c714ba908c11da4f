// Package redistest holds go-redis helpers for the module's tests: a hook
// that shows how a client's commands went out and can hold them (Batches),
// a server's error reply as go-redis reads it (ServerError), a node whose
// slot migrates (MigratingSlot), an address that refuses connections
// (RefusingAddr), and a miniredis server hosted for Go's FIPS 140-3 "only"
// mode (Miniredis).
package redistest

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Batches is a go-redis hook that counts the batches a client sends (a
// pipeline, or a lone command) and their sizes, leaving out those that set
// up a connection, and can hold the first one until released.
type Batches struct {
	mu    sync.Mutex
	sizes []int
	Hold  chan struct{} // if set, the first batch waits for it to close
}

func (h *Batches) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *Batches) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.(type) {
		case *redis.Cmd, *redis.RawCmd: // the pipeline's, not the test's own LRange, Ping...
			h.record(cmd.Name(), 1)
		}
		return next(ctx, cmd)
	}
}

func (h *Batches) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds[0].Name(), len(cmds))
		return next(ctx, cmds)
	}
}

func (h *Batches) record(first string, n int) {
	switch first {
	case "hello", "client", "auth", "select": // a new connection's set-up
		return
	}
	h.mu.Lock()
	h.sizes = append(h.sizes, n)
	held := len(h.sizes) == 1 && h.Hold != nil
	h.mu.Unlock()
	if held {
		<-h.Hold
	}
}

// Pipelines returns the sizes of the batches sent so far, in order.
func (h *Batches) Pipelines() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sizes...)
}
