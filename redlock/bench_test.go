package redlock_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/benchload"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
)

// transports are the coordinator's two ways of talking to a *redis.Client.
var transports = []struct {
	name string
	opts redlock.Options
}{
	{"auto-pipeline", redlock.Options{NodeTimeout: time.Second}},
	{"direct", redlock.Options{NodeTimeout: time.Second, NoAutoPipeline: true}},
	// The node guard off, for its cost: compare with the rows above.
	{"auto-pipeline-unguarded", redlock.Options{NodeTimeout: time.Second, NoQuarantine: true}},
	{"direct-unguarded", redlock.Options{NodeTimeout: time.Second, NoAutoPipeline: true, NoQuarantine: true}},
}

// BenchmarkCycle measures one TryLock+Unlock cycle at a time on five fake
// nodes (internal/fakeredis: canned replies, no Lua), so that ns/op and
// allocs/op are the client's own: the coordinator, go-redis and loopback
// system calls. Compare the transports within one run.
func BenchmarkCycle(b *testing.B) {
	for _, tr := range transports {
		b.Run(tr.name, func(b *testing.B) {
			l, ctx := benchLocker(b, benchload.FakeNodes(b, 5), tr.opts)
			b.ReportAllocs()
			for b.Loop() {
				benchload.Cycle(b, l, ctx, "bench")
			}
			b.StopTimer()
			_ = l.Drain(ctx)
		})
	}
}

// BenchmarkCycleParallel runs cycles from 8 goroutines per CPU on five fake
// nodes: the load under which the auto-pipeline batches commands.
func BenchmarkCycleParallel(b *testing.B) {
	for _, tr := range transports {
		b.Run(tr.name, func(b *testing.B) {
			l, ctx := benchLocker(b, benchload.FakeNodes(b, 5), tr.opts)
			benchload.ParallelCycles(b, l, ctx)
		})
	}
}

// BenchmarkCycleObserved runs BenchmarkCycleParallel's load (auto-pipeline)
// with each kind of Observer, for what observing costs the client: none; a
// counter (the library's own event building); the slog adapter with a JSON
// handler writing to io.Discard, at Debug (a line per operation) and at Info
// (the operations that went well are below the level: one Enabled call).
// Compare the rows within one run.
func BenchmarkCycleObserved(b *testing.B) {
	var counted atomic.Int64
	for _, bc := range []struct {
		name     string
		observer redlock.Observer
	}{
		{"none", nil},
		{"counting", redlock.ObserverFunc(func(redlock.Event) { counted.Add(1) })},
		{"slog-debug", redlock.NewLogObserver(slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug})))},
		{"slog-info", redlock.NewLogObserver(slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, ctx := benchLocker(b, benchload.FakeNodes(b, 5), redlock.Options{NodeTimeout: time.Second, Observer: bc.observer})
			benchload.ParallelCycles(b, l, ctx)
		})
	}
}

// BenchmarkCycleMiniredis runs cycles on five miniredis nodes, which run the
// real scripts (in gopher-lua, in this process: their share dominates),
// without and with fencing.
func BenchmarkCycleMiniredis(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts redlock.Options
	}{
		{"plain", redlock.Options{NodeTimeout: time.Second}},
		{"fencing", redlock.Options{NodeTimeout: time.Second, Fencing: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, ctx := benchLocker(b, newCluster(b, 5).nodes(nil), bc.opts)
			b.ReportAllocs()
			for b.Loop() {
				benchload.Cycle(b, l, ctx, "bench")
			}
			b.StopTimer()
			_ = l.Drain(ctx)
		})
	}
}

func benchLocker(b *testing.B, nodes []redlock.Node, opts redlock.Options) (*redlock.Locker, context.Context) {
	l, err := redlock.New(nodes, &opts)
	if err != nil {
		b.Fatal(err)
	}
	return l, context.Background()
}

// BenchmarkDecide measures the fan-out and early decision alone, over five
// nodes that answer at once.
func BenchmarkDecide(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r := quorum.Start(5, func(i int) (int, error) { return i, nil })
		r.Decide(ctx, time.Second, func(int, error) bool { return true })
		r.Wait()
	}
}
