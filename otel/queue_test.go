package redlockotel_test

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	redlockotel "github.com/redlock/redlock/otel"
	"github.com/redlock/redlock/redlock"
)

// acquireEvent is an acquisition's event on three nodes, as a Locker
// reports it.
func acquireEvent(key string) redlock.Event {
	return redlock.Event{Op: redlock.OpAcquire, Key: key, Attempt: 1, Duration: time.Millisecond, Validity: time.Second, Nodes: []redlock.NodeResult{
		{Node: 0, Name: "node 0 (127.0.0.1:7000)", Outcome: redlock.Granted, Latency: 300 * time.Microsecond},
		{Node: 1, Name: "node 1 (127.0.0.1:7001)", Outcome: redlock.Granted, Latency: 400 * time.Microsecond},
		{Node: 2, Name: "node 2 (127.0.0.1:7002)", Outcome: redlock.Unanswered},
	}}
}

// Without Flush, a queued event is recorded by the drain that its arrival
// scheduled.
func TestQueuedEventsAreRecordedWithoutFlush(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	o, err := redlockotel.New(redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		redlockotel.WithTracerProvider(sdktrace.NewTracerProvider()))
	require.NoError(t, err)
	for round := 1; round <= 3; round++ { // each round after the last one's drain has ended
		o.Observe(acquireEvent("k"))
		require.Eventually(t, func() bool { return redlockotel.Acquisitions(t, reader) == uint64(round) }, 30*time.Second, time.Millisecond,
			"round %d: recorded without Flush", round)
	}
}

// Flush records every event observed before it was called, and each event
// is recorded once, whatever the interleaving of Observe calls from many
// goroutines, drains and Flush calls (randomized schedules, seeded).
func TestFlushRecordsEveryEventObservedBeforeItUnderRandomSchedules(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 42))
		reader := sdkmetric.NewManualReader()
		o, err := redlockotel.New(redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			redlockotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))))
		require.NoError(t, err)

		var observed atomic.Int64 // events whose Observe has returned
		var wg sync.WaitGroup
		total := 0
		for g := range 6 {
			n := 50 + rng.IntN(400) // some goroutines fill whole batches, some do not
			pause := rng.IntN(4)    // how often this one pauses
			total += n
			wg.Go(func() {
				for i := range n {
					o.Observe(acquireEvent("k"))
					observed.Add(1)
					if pause > 0 && (i+g)%(pause*37) == 0 {
						time.Sleep(time.Duration(i%3) * time.Millisecond)
					}
				}
			})
		}
		flushes := 4 + rng.IntN(8)
		wg.Go(func() {
			for range flushes {
				before := observed.Load()
				o.Flush()
				if got := redlockotel.Acquisitions(t, reader); got < uint64(before) {
					t.Errorf("seed %d: after Flush, %d recorded of the %d observed before it", seed, got, before)
				}
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
		o.Flush()
		assert.EqualValues(t, total, redlockotel.Acquisitions(t, reader), "seed %d: each event recorded once", seed)
	}
}
