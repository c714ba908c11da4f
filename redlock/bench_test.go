package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
)

// BenchmarkCycle measures one TryLock+Unlock cycle on five in-process nodes
// (miniredis), with and without fencing. The nodes run in the same process,
// so ns/op and allocs/op include the servers' share; compare the two ratios
// measured in one run, not absolute figures across machines.
func BenchmarkCycle(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts redlock.Options
	}{
		{"plain", redlock.Options{NodeTimeout: time.Second}},
		{"fencing", redlock.Options{NodeTimeout: time.Second, Fencing: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := newCluster(b, 5)
			l, err := redlock.New(c.nodes(nil), &bc.opts)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				lease, err := l.TryLock(ctx, "bench", 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			_ = l.Drain(ctx)
		})
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
