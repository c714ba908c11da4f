package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// result is what one implementation's run measured.
type result struct {
	Impl       string        `json:"impl"`
	About      string        `json:"about"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	Cycles     int64         `json:"cycles"`
	Acquired   int64         `json:"acquired"`
	Contended  int64         `json:"contended"`
	Errors     int64         `json:"errors"`
	FirstError string        `json:"first_error,omitempty"`
	// ErrorKinds counts the errors by kind (errorKind): what failed and why.
	ErrorKinds map[string]int64 `json:"error_kinds,omitempty"`
	Allocs     float64          `json:"allocs_per_cycle"`
	Faults     []string         `json:"faults,omitempty"` // what -fault did, where the implementation reports it
	// Events is the Observer's event counts by Op, for the observed
	// implementations (redlock-events, redlock-slog, redlock-otel, ...).
	Events map[string]int64 `json:"events,omitempty"`
	// LongestGap is the longest time in the run with no lock granted to
	// any client (from the start to the first grant, between grants, from
	// the last grant to the end): what a fault costs in availability.
	LongestGap time.Duration `json:"longest_gap_ns"`
	// NodeCommands is how many commands the nodes processed during the run
	// (INFO stats, before and after; -1 where the nodes do not say).
	NodeCommands int64 `json:"node_commands"`

	acquire, release, cycle *hist
	// handoff is, for each acquisition that waited through another
	// client's release, the time from that client's Unlock returning to
	// this client's Lock returning.
	handoff *hist
	mallocs uint64 // allocations during the run
}

// merge adds o, another share of the same implementation's run, to r.
func (r *result) merge(o *result) {
	r.Elapsed += o.Elapsed
	r.Cycles += o.Cycles
	r.Acquired += o.Acquired
	r.Contended += o.Contended
	r.Errors += o.Errors
	if r.FirstError == "" {
		r.FirstError = o.FirstError
	}
	r.addKinds(o.ErrorKinds)
	r.acquire.merge(o.acquire)
	r.release.merge(o.release)
	r.cycle.merge(o.cycle)
	r.handoff.merge(o.handoff)
	if r.NodeCommands >= 0 && o.NodeCommands >= 0 {
		r.NodeCommands += o.NodeCommands
	} else {
		r.NodeCommands = -1
	}
	r.mallocs += o.mallocs
	r.LongestGap = max(r.LongestGap, o.LongestGap)
	r.Faults = append(r.Faults, o.Faults...)
	if r.Cycles > 0 {
		r.Allocs = float64(r.mallocs) / float64(r.Cycles)
	}
}

// addKinds adds error counts by kind to r's.
func (r *result) addKinds(kinds map[string]int64) {
	for k, n := range kinds {
		if r.ErrorKinds == nil {
			r.ErrorKinds = map[string]int64{}
		}
		r.ErrorKinds[k] += n
	}
}

func (r *result) rate() float64 { return float64(r.Acquired) / r.Elapsed.Seconds() }

// commandsPerAcquisition is NodeCommands per lock acquired (0 where unknown).
func (r *result) commandsPerAcquisition() float64 {
	if r.NodeCommands < 0 || r.Acquired == 0 {
		return 0
	}
	return float64(r.NodeCommands) / float64(r.Acquired)
}

// bench runs cfg.clients clients, each acquiring, holding and releasing a
// key in a loop, until cfg.duration has passed (then each finishes its
// cycle), cfg.ops cycles are done, or ctx ends. A cycle is an attempt: contended and failed attempts count in
// their own columns, not in the latency of completed cycles.
func bench(ctx context.Context, im *impl, cfg config, progress io.Writer) *result {
	// When the duration is up, clients start no new cycle but finish the one
	// under way: cancelling it would leave keys behind (for the next run to
	// find as contention) in implementations that do not clean up after a
	// cancelled acquisition. A cycle still running a TTL later is cut short.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stop atomic.Bool
	if cfg.ops == 0 {
		timer := time.AfterFunc(cfg.duration, func() { stop.Store(true) })
		defer timer.Stop()
		runCtx, cancel = context.WithTimeout(runCtx, cfg.duration+max(time.Second, cfg.ttl))
		defer cancel()
	}
	res := &result{Impl: im.name, About: im.about, acquire: newHist(), release: newHist(), cycle: newHist(), handoff: newHist()}
	// lastUnlock[k] is when the latest Unlock of key k returned (UnixNano).
	lastUnlock := make([]atomic.Int64, max(cfg.keys, 1))
	var started, done atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	var before, after runtimeStats
	var lastGrant, longestGap atomic.Int64 // since start
	granted := func(at time.Duration) {
		gap := int64(at) - lastGrant.Swap(int64(at))
		for {
			old := longestGap.Load()
			if gap <= old || longestGap.CompareAndSwap(old, gap) {
				return
			}
		}
	}
	before.read()
	start := time.Now()
	stopProgress := showProgress(progress, im.name, start, &done)
	for c := range cfg.clients {
		cycle := im.cycle
		if im.cycleFor != nil {
			cycle = im.cycleFor(c)
		}
		wg.Go(func() {
			acq, rel, cyc, hand := newHist(), newHist(), newHist(), newHist()
			var got, busy, errs int64
			var firstErr error
			kinds := map[string]int64{}
			for i := c; !stop.Load() && runCtx.Err() == nil; i += cfg.clients {
				if cfg.ops > 0 && started.Add(1) > int64(cfg.ops) {
					break
				}
				key := cfg.keyPrefix + im.name + ":" + strconv.Itoa(i%cfg.keys) // each implementation its own keys
				t0 := time.Now()
				a, r, o, err := cycle(runCtx, key)
				if runCtx.Err() != nil && o != acquired {
					break // the run ended under this attempt
				}
				switch o {
				case acquired:
					granted(time.Since(start) - r - cfg.hold) // when the lock was granted
					// The release this acquisition waited through, if it
					// did: stored by its client right after its Unlock
					// returned, which was before this Lock returned (and
					// this client's own store comes below, after its hold).
					locked := t0.Add(a)
					last := &lastUnlock[i%len(lastUnlock)]
					if u := time.Unix(0, last.Load()); u.After(t0) && locked.After(u) {
						hand.record(locked.Sub(u))
					}
					last.Store(time.Now().UnixNano())
					got++
					acq.record(a)
					rel.record(r)
					cyc.record(a + r)
				case contended:
					busy++
				default:
					errs++
					kinds[errorKind(err)]++
					if firstErr == nil {
						firstErr = err
					}
				}
				done.Add(1)
			}
			mu.Lock()
			defer mu.Unlock()
			res.acquire.merge(acq)
			res.release.merge(rel)
			res.cycle.merge(cyc)
			res.handoff.merge(hand)
			res.Acquired += got
			res.Contended += busy
			res.Errors += errs
			res.addKinds(kinds)
			if firstErr != nil && res.FirstError == "" {
				res.FirstError = firstErr.Error()
			}
		})
	}
	wg.Wait()
	if im.settle != nil {
		im.settle()
	}
	res.Elapsed = time.Since(start)
	granted(res.Elapsed)
	res.LongestGap = time.Duration(longestGap.Load())
	stopProgress()
	after.read()
	res.Cycles = res.Acquired + res.Contended + res.Errors
	res.mallocs = after.mallocs - before.mallocs
	if res.Cycles > 0 {
		res.Allocs = float64(res.mallocs) / float64(res.Cycles)
	}
	im.drain()
	return res
}

// showProgress prints a live line (elapsed, cycles, current rate) to w every
// half second, if w is not nil, until the returned func is called.
func showProgress(w io.Writer, name string, start time.Time, done *atomic.Int64) func() {
	if w == nil {
		return func() {}
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		last, lastAt := int64(0), start
		for {
			select {
			case <-stop:
				fmt.Fprint(w, "\r\033[K")
				return
			case now := <-tick.C:
				n := done.Load()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				last, lastAt = n, now
				fmt.Fprintf(w, "\r\033[K%s: %v elapsed, %d cycles, %.0f/s", name, now.Sub(start).Round(100*time.Millisecond), n, rate)
			}
		}
	}()
	return func() { close(stop); <-finished }
}
