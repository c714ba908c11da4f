package redlockotel

import (
	"context"
	"fmt"
	"log"
	"runtime/debug"
	"sync"
	"time"

	"github.com/redlock/redlock/redlock"
)

// Recording happens off the lock's path. A Locker calls Observe on the
// goroutine of the operation it reports, before that operation returns
// (redlock.Observer). Recorded there, a lock cycle on five nodes made a
// dozen histogram points and two spans in the SDK before the caller could
// go on; under load the longer cycles cost more than the recording itself
// (the Locker's per-node batches of commands grew smaller), and the
// adapter cost 13% of the cycles a 16-client run completed, where queued
// it costs 9% (docs/performance.md, "What observing costs").
//
// So Observe only queues the event, with the time it was observed and the
// span that parents it, and returns. A drain records the queued events in
// order on a goroutine of its own: started as soon as drainBatch events
// wait, else drainAfter after the first event queued since the last drain.
// No goroutine runs while nothing is queued, and nothing needs closing.
//
// Nothing is dropped. Where maxQueued events already wait (the drain fell
// behind), Observe records the event itself, as a synchronous adapter
// would: memory stays bounded, and the caller pays only then. Flush
// records everything observed before it was called.
const (
	drainBatch = 128
	drainAfter = 10 * time.Millisecond
	maxQueued  = 4096
)

// pending is an observed event, or a round trip, waiting to be recorded.
type pending struct {
	e      redlock.Event
	end    time.Time         // when it was observed: its span's end
	parent context.Context   // its span's parent, read when it was observed (parentOf)
	trip   redlock.RoundTrip // where isTrip: a round trip, not an event
	isTrip bool
}

// queue holds the events observed and not yet recorded.
type queue struct {
	mu    sync.Mutex
	items []pending // under mu
	spare []pending // under mu: the last recorded batch's storage, for the next
	armed bool      // under mu: a drain is scheduled (timer) or running
	timer *time.Timer

	// draining is held by whoever records a batch taken from items (a
	// drain, or Flush): Flush waits for a batch being recorded.
	draining sync.Mutex
}

// Observe queues e, to be recorded off the caller's goroutine. It does
// not block: at worst (maxQueued events waiting) it records e itself.
func (o *Observer) Observe(e redlock.Event) {
	o.enqueue(pending{e: e, end: time.Now(), parent: o.parentOf(e.Key)})
}

// ObserveRoundTrip queues t, to be recorded off the transport's goroutine,
// as Observe does an event.
func (o *Observer) ObserveRoundTrip(t redlock.RoundTrip) {
	o.enqueue(pending{trip: t, isTrip: true})
}

// enqueue queues p, arming a drain if none is, or records p itself when
// maxQueued events wait.
func (o *Observer) enqueue(p pending) {
	q := &o.queue
	q.mu.Lock()
	if len(q.items) >= maxQueued {
		q.mu.Unlock()
		o.recordRecovering(&p)
		return
	}
	q.items = append(q.items, p)
	now := false
	switch {
	case !q.armed:
		q.armed = true
		if q.timer == nil {
			q.timer = time.AfterFunc(drainAfter, o.drain)
		} else {
			q.timer.Reset(drainAfter)
		}
	case len(q.items) == drainBatch:
		// A full batch: start the scheduled drain now. Where the timer
		// has fired already, its drain is running and takes this batch.
		now = q.timer.Stop()
	}
	q.mu.Unlock()
	if now {
		go o.drain()
	}
}

// drain records queued events until none are left, then lets the next
// event schedule the next drain.
func (o *Observer) drain() {
	o.recordQueued(true)
}

// Flush records every event observed before it was called, and returns
// when they are in the providers. Call it before reading metrics or spans
// the Locker's events produced (a test's in-memory reader: after the
// Locker's Drain, which waits for its background events), and before
// shutting the providers down, so that the last events are exported.
// Without it, an event is recorded within milliseconds. Flush must not be
// called from code the recording calls (a span processor's OnStart or
// OnEnd): the drain would wait for itself, as the SDK's own ForceFlush
// would.
func (o *Observer) Flush() {
	o.recordQueued(false)
}

// recordQueued records batches of queued events until the queue is empty.
// last says that it is the scheduled drain, which disarms the queue when
// it finds it empty (a Flush leaves the schedule as it is).
func (o *Observer) recordQueued(last bool) {
	q := &o.queue
	q.draining.Lock()
	defer q.draining.Unlock()
	for {
		q.mu.Lock()
		batch := q.items
		if len(batch) == 0 {
			if last {
				q.armed = false
			}
			q.mu.Unlock()
			return
		}
		q.items, q.spare = q.spare[:0], nil
		q.mu.Unlock()
		for i := range batch {
			o.recordRecovering(&batch[i])
			batch[i] = pending{} // let its event's nodes and error go
		}
		q.mu.Lock()
		q.spare = batch[:0]
		q.mu.Unlock()
	}
}

// recordRecovering records p, recovering from a provider's panic: the
// panic is written to the standard logger with its stack, and recording
// goes on with the next event. Recording runs on the drain's goroutine,
// where an unrecovered panic would end the process (the Locker recovers an
// Observer's panic only on its own goroutine), and a panic in the middle of
// a batch would lose the rest of it.
func (o *Observer) recordRecovering(p *pending) {
	defer func() {
		if r := recover(); r != nil {
			what := fmt.Sprintf("a %v event for %q", p.e.Op, p.e.Key)
			if p.isTrip {
				what = "a round trip to " + p.trip.Name
			}
			log.Printf("redlockotel: a provider panicked recording %s (recovered; recording went on): %v\n%s", what, r, debug.Stack())
		}
	}()
	o.record(p)
}
