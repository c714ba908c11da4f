package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redlock/redlock/redlock"
)

// result is what a run measured.
type result struct {
	elapsed                     time.Duration
	acquired, contended, failed int
	acquire, release, cycle     []time.Duration
}

// bench runs cfg.clients clients, each locking a key, holding it and
// unlocking it in a loop, until cfg.duration has passed or ctx ends.
func bench(ctx context.Context, nodes []redlock.Node, cfg config) (*result, error) {
	locker, err := redlock.New(nodes, nil)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()

	var mu sync.Mutex
	total := &result{}
	var wg sync.WaitGroup
	start := time.Now()
	for c := range cfg.clients {
		wg.Go(func() {
			r := client(ctx, locker, cfg, c)
			mu.Lock()
			defer mu.Unlock()
			total.merge(r)
		})
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelDrain()
	_ = locker.Drain(drainCtx)
	return total, nil
}

func client(ctx context.Context, locker *redlock.Locker, cfg config, id int) *result {
	r := &result{}
	for i := id; ctx.Err() == nil; i += cfg.clients {
		key := "redlock-bench:" + strconv.Itoa(i%cfg.keys)
		t0 := time.Now()
		lease, err := locker.TryLock(ctx, key, cfg.ttl)
		t1 := time.Now()
		switch {
		case ctx.Err() != nil:
			return r
		case errors.Is(err, redlock.ErrNotObtained):
			r.contended++
			continue
		case err != nil:
			r.failed++
			continue
		}
		r.acquired++
		r.acquire = append(r.acquire, t1.Sub(t0))
		if cfg.hold > 0 {
			time.Sleep(cfg.hold)
		}
		t2 := time.Now()
		if err := lease.Unlock(context.WithoutCancel(ctx)); err != nil {
			r.failed++
		}
		t3 := time.Now()
		r.release = append(r.release, t3.Sub(t2))
		r.cycle = append(r.cycle, t3.Sub(t0))
	}
	return r
}

func (r *result) merge(o *result) {
	r.acquired += o.acquired
	r.contended += o.contended
	r.failed += o.failed
	r.acquire = append(r.acquire, o.acquire...)
	r.release = append(r.release, o.release...)
	r.cycle = append(r.cycle, o.cycle...)
}

// percentile returns the q-quantile (0..1) of sorted, nearest-rank.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (r *result) print(w io.Writer) {
	fmt.Fprintf(w, "cycles/s %.0f   acquired %d   contended %d   errors %d   (%v)\n",
		float64(len(r.cycle))/r.elapsed.Seconds(), r.acquired, r.contended, r.failed, r.elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "%-8s %10s %10s %10s %10s %10s\n", "latency", "p50", "p90", "p99", "p99.9", "max")
	for _, row := range []struct {
		name string
		d    []time.Duration
	}{{"acquire", r.acquire}, {"release", r.release}, {"cycle", r.cycle}} {
		slices.Sort(row.d)
		fmt.Fprintf(w, "%-8s", row.name)
		for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
			fmt.Fprintf(w, " %10v", percentile(row.d, q).Round(time.Microsecond))
		}
		fmt.Fprintln(w)
	}
}
