package redlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	redlockotel "github.com/redlock/redlock/otel"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
)

// setup is an Observer on in-memory readers, and a Locker on n in-process
// nodes that reports to it.
type setup struct {
	reader  *sdkmetric.ManualReader
	spans   *tracetest.SpanRecorder
	obs     *redlockotel.Observer
	servers []*miniredis.Miniredis
	locker  *redlock.Locker
}

func newSetup(t *testing.T, n int, opts redlock.Options) *setup {
	t.Helper()
	s := &setup{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	var err error
	s.obs, err = redlockotel.New(
		redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))),
		redlockotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))))
	require.NoError(t, err)
	var nodes []redlock.Node
	for range n {
		m := miniredis.RunT(t)
		_ = m.Set("redlock:memory", "0 ?") // trusted (miniredis has no INFO server for the guard)
		s.servers = append(s.servers, m)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		nodes = append(nodes, c)
	}
	opts.Observer = s.obs
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = 5 * time.Second
	}
	s.locker, err = redlock.New(nodes, &opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.locker.Drain(context.Background()) })
	return s
}

// metrics collects every metric, by name.
func (s *setup) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	require.NoError(t, s.locker.Drain(t.Context()))
	s.obs.Flush()
	var rm metricdata.ResourceMetrics
	require.NoError(t, s.reader.Collect(t.Context(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, redlockotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// histogramCount is the number of recordings of m whose attributes include want.
func histogramCount(t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) uint64 {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a float64 histogram", m.Name)
	var n uint64
	for _, p := range h.DataPoints {
		if has(p.Attributes, want) {
			n += p.Count
		}
	}
	return n
}

func counterSum(t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) int64 {
	t.Helper()
	c, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is an int64 sum", m.Name)
	var n int64
	for _, p := range c.DataPoints {
		if has(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

func has(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func TestMetricsAndSpansOfLockOperations(t *testing.T) {
	ctx := t.Context()
	s := newSetup(t, 3, redlock.Options{})
	settle := func() { require.NoError(t, s.locker.Drain(ctx)) } // every node answered: the next command goes alone
	lease, err := s.locker.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	settle()
	_, err = s.locker.TryLock(ctx, "k", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	settle()
	require.NoError(t, lease.Extend(ctx, 10*time.Second))
	settle()
	require.NoError(t, lease.Check(ctx))
	settle()
	require.NoError(t, lease.Unlock(ctx))

	m := s.metrics(t)
	d := m["redlock.operation.duration"]
	assert.Equal(t, "s", d.Unit)
	op := func(name, outcome string) uint64 {
		return histogramCount(t, d, attribute.String("redlock.operation", name), attribute.String("redlock.outcome", outcome))
	}
	assert.EqualValues(t, 1, op("acquire", "ok"))
	assert.EqualValues(t, 1, op("acquire", "contention"))
	assert.EqualValues(t, 1, op("extend", "ok"))
	assert.EqualValues(t, 1, op("check", "ok"))
	assert.EqualValues(t, 1, op("unlock", "ok"))
	assert.EqualValues(t, 1, counterSum(t, m["redlock.contention"]))

	db := m["db.client.operation.duration"]
	assert.Equal(t, "s", db.Unit)
	addr := s.servers[0].Server().Addr()
	// Every round trip, whether or not its decision waited for it: one
	// operation at a time, each carries one command.
	redisAttrs := []attribute.KeyValue{attribute.String("db.system.name", "redis"), attribute.String("server.address", addr.IP.String())}
	assert.EqualValues(t, 6, histogramCount(t, db, append(redisAttrs, attribute.String("db.operation.name", "SET"))...), "two acquisitions' SETs on three nodes")
	// Extend, check, unlock on three nodes; and the contended attempt's
	// release where its decision came before the node's answer (it may
	// have granted: see Locker.TryLock).
	scripts := histogramCount(t, db, append(redisAttrs, attribute.String("db.operation.name", "EVALSHA"))...)
	assert.True(t, scripts == 9 || scripts == 10, "%d EVALSHA round trips", scripts)
	assert.EqualValues(t, 6+scripts, histogramCount(t, db), "nothing else")
	ports := map[int64]bool{}
	for _, p := range db.Data.(metricdata.Histogram[float64]).DataPoints {
		if v, ok := p.Attributes.Value("server.port"); ok {
			ports[v.AsInt64()] = true
		}
	}
	assert.GreaterOrEqual(t, len(ports), 2, "server.port per node")

	names := map[string]int{}
	for _, sp := range s.spans.Ended() {
		names[sp.Name()]++
		assert.False(t, sp.Parent().IsValid(), "outside Do: a root span")
		assert.NotEmpty(t, sp.Events(), "%s: an event per node", sp.Name())
		assert.True(t, sp.StartTime().Before(sp.EndTime()) || sp.StartTime().Equal(sp.EndTime()))
	}
	assert.Equal(t, map[string]int{"redlock acquire": 2, "redlock extend": 1, "redlock check": 1, "redlock unlock": 1}, names, "the contended attempt was granted nowhere: nothing to release")
	for _, sp := range s.spans.Ended() {
		if sp.Name() == "redlock acquire" {
			assert.Len(t, sp.Events(), 3)
			assert.NotEqual(t, codes.Error, sp.Status().Code, "contention is not an error")
		}
	}
}

func TestUnavailableNodes(t *testing.T) {
	ctx := t.Context()
	s := newSetup(t, 3, redlock.Options{NodeTimeout: 200 * time.Millisecond})
	require.NoError(t, s.locker.Warm(ctx))
	s.servers[1].Close()
	s.servers[2].Close()
	_, err := s.locker.TryLock(ctx, "k", 10*time.Second)
	require.Error(t, err)
	m := s.metrics(t)
	assert.EqualValues(t, 1, histogramCount(t, m["redlock.operation.duration"], attribute.String("redlock.operation", "acquire"), attribute.String("redlock.outcome", "unavailable")))
	// The two dead nodes, in the attempt and again in its release.
	assert.EqualValues(t, 2, counterSum(t, m["redlock.node.unavailable"], attribute.String("redlock.operation", "acquire")))
	assert.EqualValues(t, 2, counterSum(t, m["redlock.node.unavailable"], attribute.String("redlock.operation", "acquire"), attribute.String("error.type", "timeout"))+
		counterSum(t, m["redlock.node.unavailable"], attribute.String("redlock.operation", "acquire"), attribute.String("error.type", "_OTHER")), "refused, or dialed until the time ran out")
	// Their round trips failed; the live node's went well.
	db := m["db.client.operation.duration"]
	assert.EqualValues(t, 2, histogramCount(t, db, attribute.String("db.operation.name", "SET"), attribute.String("error.type", "_OTHER"))+
		histogramCount(t, db, attribute.String("db.operation.name", "SET"), attribute.String("error.type", "timeout")))
	assert.EqualValues(t, 1, histogramCount(t, db, attribute.String("db.operation.name", "SET"), attribute.Int("server.port", s.servers[0].Server().Addr().Port)))
	for _, sp := range s.spans.Ended() {
		if sp.Name() == "redlock acquire" {
			assert.Equal(t, codes.Error, sp.Status().Code)
		}
	}
}

// A lease lost under Do: the counter, and a "redlock do" span that parents
// the operations of its key.
func TestLostLeaseUnderDo(t *testing.T) {
	ctx := t.Context()
	s := newSetup(t, 3, redlock.Options{})
	err := s.obs.Do(ctx, s.locker, "k", 600*time.Millisecond, func(ctx context.Context, lease *redlock.Lease) error {
		require.NoError(t, s.locker.Drain(ctx))
		for _, m := range s.servers {
			_ = m.Set("k", "someone-else") // the next extension is refuted
		}
		<-ctx.Done()
		return nil
	})
	require.ErrorIs(t, err, redlock.ErrLost)
	m := s.metrics(t)
	assert.EqualValues(t, 1, counterSum(t, m["redlock.lease.lost"]))
	assert.GreaterOrEqual(t, histogramCount(t, m["redlock.operation.duration"], attribute.String("redlock.operation", "extend"), attribute.String("redlock.outcome", "not_held")), uint64(1))

	var do sdktrace.ReadOnlySpan
	for _, sp := range s.spans.Ended() {
		if sp.Name() == "redlock do" {
			do = sp
		}
	}
	require.NotNil(t, do)
	assert.Equal(t, codes.Error, do.Status().Code)
	children := map[string]bool{}
	for _, sp := range s.spans.Ended() {
		if sp.Parent().SpanID() == do.SpanContext().SpanID() {
			children[sp.Name()] = true
		}
	}
	assert.True(t, children["redlock acquire"] && children["redlock extend"] && children["redlock lost"], "Do's operations are its children: %v", children)
}

func TestQuarantineAndHealthGauges(t *testing.T) {
	ctx := t.Context()
	s := newSetup(t, 3, redlock.Options{})
	reg, err := s.obs.ObserveHealth(s.locker)
	require.NoError(t, err)
	defer reg.Unregister()
	lease, err := s.locker.TryLock(ctx, "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(ctx))
	s.servers[0].FlushAll() // a restart without persistence, to the guard
	lease, err = s.locker.TryLock(ctx, "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(ctx))

	m := s.metrics(t)
	addr := s.servers[0].Server().Addr()
	assert.EqualValues(t, 1, counterSum(t, m["redlock.node.quarantines"], attribute.Int("server.port", addr.Port)))
	rtt, ok := m["redlock.node.rtt"].Data.(metricdata.Gauge[float64])
	require.True(t, ok)
	assert.Len(t, rtt.DataPoints, 3, "one per node")
	for _, p := range rtt.DataPoints {
		assert.Positive(t, p.Value)
	}
}

// Observe and the recording it queues allocate little: an
// acquisition's event on three nodes, with every span recorded (the worst
// case: the SDK's default sampler records every root span), and with spans
// sampled out (a ratio sampler's usual case), against metrics alone.
func BenchmarkObserve(b *testing.B) {
	e := acquireEvent("k")
	for _, bc := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{
		{"spans-recorded", sdktrace.AlwaysSample()},
		{"spans-sampled-out", sdktrace.NeverSample()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			o, err := redlockotel.New(
				redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))),
				redlockotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(bc.sampler))))
			require.NoError(b, err)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				o.Observe(e)
				if n++; n%128 == 0 {
					o.Flush() // the recording, as a drain does it, counted
				}
			}
			o.Flush()
		})
	}
}

// Both duration histograms count in buckets from 100 µs to 10 s: a lock's
// round trips are mostly under a millisecond, and the SDK's default
// boundaries (0, 5, 10, ... in seconds) would put them all in one bucket.
func TestDurationHistogramsHaveBucketsForLockLatencies(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	o, err := redlockotel.New(redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		redlockotel.WithTracerProvider(sdktrace.NewTracerProvider()))
	require.NoError(t, err)
	o.Observe(acquireEvent("k"))
	for i, took := range []time.Duration{300 * time.Microsecond, 400 * time.Microsecond} {
		o.ObserveRoundTrip(redlock.RoundTrip{Node: i, Name: fmt.Sprintf("node %d (127.0.0.1:700%d)", i, i), Command: "set", Commands: 1, Duration: took})
	}
	o.Flush()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	want := []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	seen := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				continue
			}
			for _, p := range h.DataPoints {
				seen++
				assert.Equal(t, want, p.Bounds, m.Name)
				if m.Name == "db.client.operation.duration" {
					// 300 µs and 400 µs: in (250 µs, 500 µs], not all in one bucket with the rest.
					assert.Equal(t, p.Count, p.BucketCounts[2], "round trips of %v", p.Attributes)
				}
			}
		}
	}
	assert.Equal(t, 3, seen, "the acquisition's duration, and two nodes' round trips")
}

// redisReply is an error reply, as go-redis gives one (redis.Error).
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// Round trips are recorded as database calls: a batch as PIPELINE, a
// failure with its error.type, an error reply with its status code too.
func TestRoundTripsAsDatabaseCalls(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	o, err := redlockotel.New(redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		redlockotel.WithTracerProvider(sdktrace.NewTracerProvider()))
	require.NoError(t, err)
	node := "node 1 (127.0.0.1:7001)"
	for _, trip := range []redlock.RoundTrip{
		{Node: 1, Name: node, Command: "set", Commands: 1, Duration: time.Millisecond},
		{Node: 1, Name: node, Command: "evalsha", Commands: 1, Duration: time.Millisecond},
		{Node: 1, Name: node, Command: "set", Commands: 7, Duration: time.Millisecond},
		{Node: 1, Name: node, Command: "get", Commands: 1, Duration: time.Millisecond},
		{Node: 1, Name: node, Command: "evalsha", Commands: 1, Duration: 50 * time.Millisecond, Err: fmt.Errorf("no reply: %w", quorum.ErrNoReply)},
		{Node: 1, Name: node, Command: "set", Commands: 1, Duration: time.Millisecond, Err: redisReply("NOPERM this user has no permissions to run the 'set' command")},
		{Node: 1, Name: node, Command: "set", Commands: 3, Duration: time.Millisecond, Err: errors.New("dial tcp 127.0.0.1:7001: connect: connection refused")},
	} {
		o.ObserveRoundTrip(trip)
	}
	o.Flush()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var db metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "db.client.operation.duration" {
				db = m
			}
		}
	}
	server := []attribute.KeyValue{attribute.String("db.system.name", "redis"), attribute.String("server.address", "127.0.0.1"), attribute.Int("server.port", 7001)}
	count := func(kvs ...attribute.KeyValue) uint64 { return histogramCount(t, db, append(kvs, server...)...) }
	assert.EqualValues(t, 7, histogramCount(t, db), "a point per round trip")
	assert.EqualValues(t, 2, count(attribute.String("db.operation.name", "SET")), "one that went well, one refused")
	assert.EqualValues(t, 2, count(attribute.String("db.operation.name", "EVALSHA")))
	assert.EqualValues(t, 2, count(attribute.String("db.operation.name", "PIPELINE")), "a batch is one call, as go-redis names it")
	assert.EqualValues(t, 1, count(attribute.String("db.operation.name", "GET")))
	assert.EqualValues(t, 1, count(attribute.String("db.operation.name", "EVALSHA"), attribute.String("error.type", "timeout")))
	assert.EqualValues(t, 1, count(attribute.String("error.type", "NOPERM"), attribute.String("db.response.status_code", "NOPERM")))
	assert.EqualValues(t, 1, count(attribute.String("db.operation.name", "PIPELINE"), attribute.String("error.type", "_OTHER")))
	for _, p := range db.Data.(metricdata.Histogram[float64]).DataPoints {
		_, failed := p.Attributes.Value("error.type")
		_, coded := p.Attributes.Value("db.response.status_code")
		if !failed {
			assert.False(t, coded, "%v", p.Attributes)
		}
	}
}
