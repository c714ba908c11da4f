package integration

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	redlockotel "github.com/redlock/redlock/otel"
	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
)

// The OpenTelemetry adapter on real servers: a frozen node shows as
// unavailable votes of its server.port (the majority decided without it,
// and its calls failed afterwards: OpLateFailure), a
// restart without persistence as one quarantine of that node, and every
// acquisition as a span with an event per node; lock-level durations come
// with their outcomes.
func TestOpenTelemetryOnRealFaults(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	obs, err := redlockotel.New(
		redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		redlockotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))))
	require.NoError(t, err)
	l := newLocker(t, c, &redlock.Options{NodeTimeout: 300 * time.Millisecond, MaxTTL: 30 * time.Second, Observer: obs})
	port := func(i int) int {
		host := c.Nodes[i].Client.Options().Addr
		_, p, err := net.SplitHostPort(host)
		require.NoError(t, err)
		n, err := strconv.Atoi(p)
		require.NoError(t, err)
		return n
	}
	cycle := func(key string) {
		t.Helper()
		lease, err := l.TryLock(ctx, key, 5*time.Second)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(ctx))
	}

	cycle("it:otel:healthy")

	require.NoError(t, c.Nodes[4].Freeze(ctx))
	cycle("it:otel:frozen")
	drain(t, l) // the frozen node's calls fail meanwhile (the Locker stops waiting for them)
	require.NoError(t, c.Nodes[4].Thaw(context.Background()))

	require.NoError(t, c.Nodes[3].Restart(ctx)) // it forgets every key
	eventually(t, 30*time.Second, "the guard quarantines the restarted node", func() (bool, error) {
		lease, err := l.TryLock(ctx, "it:otel:restarted", 5*time.Second)
		if err != nil {
			return false, nil // the node's connection may still be failing
		}
		if err := lease.Unlock(ctx); err != nil {
			return false, err
		}
		drain(t, l)
		return counterSum(collect(t, obs, reader)["redlock.node.quarantines"]) > 0, nil
	})

	m := collect(t, obs, reader)
	frozen := attribute.Int("server.port", port(4))
	assert.GreaterOrEqual(t, counterSum(m["redlock.node.unavailable"], frozen, attribute.String("redlock.operation", "acquire")), int64(1), "the frozen node's acquire vote")
	for i := range 3 {
		assert.Zero(t, counterSum(m["redlock.node.unavailable"], attribute.Int("server.port", port(i))), "node %d was healthy throughout", i)
	}
	assert.EqualValues(t, 1, counterSum(m["redlock.node.quarantines"], attribute.Int("server.port", port(3))), "one quarantine, of the restarted node")
	assert.Zero(t, counterSum(m["redlock.node.quarantines"], frozen), "a frozen node forgot nothing")
	assert.GreaterOrEqual(t, histogramCount(m["redlock.operation.duration"], attribute.String("redlock.operation", "acquire"), attribute.String("redlock.outcome", "ok")), uint64(3))
	db := m["db.client.operation.duration"]
	assert.GreaterOrEqual(t, histogramCount(db, attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", "SET")), uint64(12), "three acquisitions' SETs, on four nodes at least")
	assert.GreaterOrEqual(t, histogramCount(db, frozen, attribute.String("db.operation.name", "SET"), attribute.String("error.type", "timeout")), uint64(1), "the frozen node's round trip ran out of time")
	for i := range 3 {
		assert.Zero(t, histogramCount(db, attribute.Int("server.port", port(i)), attribute.String("error.type", "timeout")), "node %d was healthy throughout", i)
	}

	names := map[string]int{}
	for _, s := range spans.Ended() {
		names[s.Name()]++
		if s.Name() == "redlock acquire" {
			assert.Len(t, s.Events(), len(c.Nodes), "an event per node")
		}
		if s.Name() == "redlock quarantine" {
			assert.Contains(t, fmt.Sprint(s.Attributes()), "memory", "the quarantine's cause")
		}
	}
	assert.GreaterOrEqual(t, names["redlock acquire"], 3)
	assert.Equal(t, 1, names["redlock quarantine"], "one quarantine span: %v", names)
	assert.Positive(t, names["redlock late failure"], "the frozen node's late failures: %v", names)
}

// collect reads every metric the reader holds, by name, once obs has
// recorded the events it queued.
func collect(t *testing.T, obs *redlockotel.Observer, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	obs.Flush()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(t.Context(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// counterSum is the total of an int64 counter's points whose attributes
// include want (0 if the counter recorded nothing).
func counterSum(m metricdata.Metrics, want ...attribute.KeyValue) int64 {
	c, _ := m.Data.(metricdata.Sum[int64])
	var n int64
	for _, p := range c.DataPoints {
		if hasAttrs(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// histogramCount is the number of recordings whose attributes include want.
func histogramCount(m metricdata.Metrics, want ...attribute.KeyValue) uint64 {
	h, _ := m.Data.(metricdata.Histogram[float64])
	var n uint64
	for _, p := range h.DataPoints {
		if hasAttrs(p.Attributes, want) {
			n += p.Count
		}
	}
	return n
}

func hasAttrs(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}
