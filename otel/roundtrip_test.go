package redlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	redlockotel "github.com/redlock/redlock/otel"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
)

func observerWithReader(t *testing.T) (*redlockotel.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	o, err := redlockotel.New(redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		redlockotel.WithTracerProvider(sdktrace.NewTracerProvider()))
	require.NoError(t, err)
	return o, reader
}

func operationDurations(t *testing.T, reader *sdkmetric.ManualReader) (metricdata.Metrics, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "db.client.operation.duration" {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// Round trips observed from many goroutines at once, past maxQueued (so
// that some are recorded on the observing goroutine, beside the drain),
// with Flush called concurrently, and odd input: every one is recorded,
// none panics (a recovered panic would show as a missing point), no race.
func TestEveryConcurrentOddRoundTripIsRecorded(t *testing.T) {
	o, reader := observerWithReader(t)
	odd := []redlock.RoundTrip{
		{Node: -1, Name: "node -1", Command: "set", Commands: 1},
		{Node: 1 << 40, Name: "node huge (127.0.0.9:1)", Command: "evalsha", Commands: 1},
		{Node: 2, Name: "", Command: "", Commands: 0},
		{Node: 3, Name: "node 3 (h:1)", Command: "get", Commands: 0},
		{Node: 3, Name: "node 3 (h:1)", Command: "lrem", Commands: 1, Err: errors.New("")},
		{Node: 3, Name: "node 3 (h:1)", Command: "pttl", Commands: 1, Err: redisReply("")},
		{Node: 3, Name: "node 3 (h:1)", Command: "set", Commands: 1, Err: redisReply(" ")},
		{Node: 3, Name: "node 3 (h:1)", Command: "set", Commands: 2, Err: fmt.Errorf("x: %w", quorum.ErrNoReply)},
		{Node: 4, Name: "node 4 ([::1]:6379)", Command: "weird", Commands: 1, Err: &net.OpError{Op: "read", Err: errors.New("boom")}},
		{Node: 0, Name: "node 0 (a:1)", Command: "set", Commands: 1},
		{Node: 0, Name: "node 0 (b:1)", Command: "set", Commands: 1}, // another Locker's node 0, on the same Observer
	}
	const goroutines, each = 8, 1200
	stop := make(chan struct{})
	var flushes sync.WaitGroup
	flushes.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				o.Flush()
			}
		}
	})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				trip := odd[(g+i)%len(odd)]
				trip.Duration = time.Duration(i) * time.Microsecond
				if i%97 == 0 {
					trip.Command = fmt.Sprintf("cmd%d", g) // names made lazily, concurrently (tripSet)
				}
				o.ObserveRoundTrip(trip)
			}
		})
	}
	wg.Wait()
	close(stop)
	flushes.Wait()
	o.Flush()
	db, ok := operationDurations(t, reader)
	require.True(t, ok)
	assert.EqualValues(t, goroutines*each, histogramCount(t, db), "a point per round trip")
}

// Odd input: an Event with no Op (the zero Event, or one a wrapper forwards
// unfilled) is an event, not a round trip: it must not be recorded as a
// db.client.operation.duration call of a node named "" that never was (as
// it was while pending told the two apart by e.Op == 0).
func TestAZeroEventIsNotRecordedAsARoundTrip(t *testing.T) {
	o, reader := observerWithReader(t)
	o.Observe(redlock.Event{Key: "k", Duration: time.Millisecond})
	o.Flush()
	db, ok := operationDurations(t, reader)
	if ok {
		assert.Zero(t, histogramCount(t, db), "an Event recorded as a database call")
	}
}
