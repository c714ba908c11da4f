// Package benchload is the load of the cycle benchmarks (the library's in
// redlock/ and the OpenTelemetry adapter's in otel/): lock cycles on
// in-process fake nodes, one at a time or from many goroutines, so that
// the two modules' figures measure the same thing.
package benchload

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/fakeredis"
	"github.com/redlock/redlock/redlock"
)

// FakeNodes starts n fake nodes (internal/fakeredis: canned replies, no
// Lua), closed when b ends, and returns a client for each.
func FakeNodes(b *testing.B, n int) []redlock.Node {
	b.Helper()
	var nodes []redlock.Node
	for range n {
		s, err := fakeredis.Start()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
		b.Cleanup(func() { c.Close() })
		nodes = append(nodes, c)
	}
	return nodes
}

// Cycle takes key with TryLock and releases it, reporting a failure to b.
func Cycle(b *testing.B, l *redlock.Locker, ctx context.Context, key string) {
	lease, err := l.TryLock(ctx, key, 10*time.Second)
	if err != nil {
		b.Error(err)
		return
	}
	if err := lease.Unlock(ctx); err != nil {
		b.Error(err)
	}
}

// ParallelCycles runs cycles from 8 goroutines per CPU, each on a key of
// its own (the load under which the auto-pipeline batches commands), then
// drains l.
func ParallelCycles(b *testing.B, l *redlock.Locker, ctx context.Context) {
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		key := "bench:" + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			Cycle(b, l, ctx, key)
		}
	})
	b.StopTimer()
	_ = l.Drain(ctx)
}
