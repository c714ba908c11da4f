package redlock_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
)

// benchCases are the Locker set-ups the cycle benchmarks compare: both
// transports, with and without fencing.
var benchCases = []struct {
	name string
	opts redlock.Options
}{
	{"auto-pipeline", redlock.Options{NodeTimeout: time.Second}},
	{"auto-pipeline/fencing", redlock.Options{NodeTimeout: time.Second, Fencing: true}},
	{"direct", redlock.Options{NodeTimeout: time.Second, NoAutoPipeline: true}},
	{"direct/fencing", redlock.Options{NodeTimeout: time.Second, NoAutoPipeline: true, Fencing: true}},
}

// BenchmarkCycle measures one TryLock+Unlock cycle on five in-process nodes
// (miniredis), one cycle at a time. The nodes run in the same process, so
// ns/op and allocs/op include the servers' share; compare the ratios
// measured in one run, not absolute figures across machines.
func BenchmarkCycle(b *testing.B) {
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			l, ctx := benchLocker(b, bc.opts)
			b.ReportAllocs()
			for b.Loop() {
				cycle(b, l, ctx, "bench")
			}
			b.StopTimer()
			_ = l.Drain(ctx)
		})
	}
}

// BenchmarkCycleParallel runs cycles from 8 goroutines per CPU, each on its
// own keys: the load under which the auto-pipeline batches commands.
func BenchmarkCycleParallel(b *testing.B) {
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			l, ctx := benchLocker(b, bc.opts)
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				key := "bench:" + strconv.FormatInt(next.Add(1), 10)
				for pb.Next() {
					cycle(b, l, ctx, key)
				}
			})
			b.StopTimer()
			_ = l.Drain(ctx)
		})
	}
}

func benchLocker(b *testing.B, opts redlock.Options) (*redlock.Locker, context.Context) {
	c := newCluster(b, 5)
	l, err := redlock.New(c.nodes(nil), &opts)
	if err != nil {
		b.Fatal(err)
	}
	return l, context.Background()
}

func cycle(b *testing.B, l *redlock.Locker, ctx context.Context, key string) {
	lease, err := l.TryLock(ctx, key, 10*time.Second)
	if err != nil {
		b.Error(err)
		return
	}
	if err := lease.Unlock(ctx); err != nil {
		b.Error(err)
	}
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
