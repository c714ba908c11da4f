package redlock

import (
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/redis/go-redis/v9"
)

// A dialWatch counts the connections a *redis.Client dials. The node guard
// uses the count to skip SCRIPT EXISTS, its check for a new server process,
// on connections it has already vouched for:
//
// A server process's connections die with it, so a connection opened
// before the guard found the examine script cached (or examined the node)
// leads to the process it checked, or to an earlier one that is gone and
// answers nothing. Only a connection dialed since can lead to a new
// process. So a batch needs SCRIPT EXISTS only while the client has dialed
// since the last check; between dials the marker's PTTL (or its GET and
// TIME) suffices.
// This holds while one server process at a time answers a node's address.
// A proxy that keeps its clients' connections open across a restart of the
// server behind it breaks it: there a restart that kept the marker (from an
// RDB snapshot or AOF) is not seen; one that lost it is, by the marker.
//
// The watch is a go-redis hook on the client (AddHook), which changes
// nothing but counts dials; one per client, however many Lockers share it.
type dialWatch struct {
	dials atomic.Uint64
}

// DialHook counts a dial before it starts, so that the count has moved
// before the connection can carry a command.
func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		w.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (w *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (w *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// count is how many dials have started so far.
func (w *dialWatch) count() uint64 { return w.dials.Load() }

// dialWatches holds each client's watch, without keeping the client alive.
var dialWatches struct {
	mu sync.Mutex
	m  map[weak.Pointer[redis.Client]]*dialWatch
}

// watchDials returns c's dialWatch, hooking it into c on first use.
func watchDials(c *redis.Client) *dialWatch {
	key := weak.Make(c)
	dialWatches.mu.Lock()
	defer dialWatches.mu.Unlock()
	if w, ok := dialWatches.m[key]; ok {
		return w
	}
	w := new(dialWatch)
	c.AddHook(w)
	if dialWatches.m == nil {
		dialWatches.m = make(map[weak.Pointer[redis.Client]]*dialWatch)
	}
	dialWatches.m[key] = w
	runtime.AddCleanup(c, func(key weak.Pointer[redis.Client]) {
		dialWatches.mu.Lock()
		delete(dialWatches.m, key)
		dialWatches.mu.Unlock()
	}, key)
	return w
}
