package redlockotel

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redlock/redlock/redlock"
)

// onFirstEnd is a span processor that counts every span ended, and calls
// first on the first one (its OnEnd, on the recording goroutine): a
// provider that is slow to take a span, or that panics.
type onFirstEnd struct {
	first func()
	once  sync.Once
	ended atomic.Int64
}

func (f *onFirstEnd) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (f *onFirstEnd) OnEnd(sdktrace.ReadOnlySpan) {
	f.ended.Add(1)
	isFirst := false
	f.once.Do(func() { isFirst = true }) // not first() inside Do: later spans must not wait for it
	if isFirst {
		f.first()
	}
}
func (f *onFirstEnd) Shutdown(context.Context) error   { return nil }
func (f *onFirstEnd) ForceFlush(context.Context) error { return nil }

// blockFirstSpan is an onFirstEnd whose first span waits for open to
// close; blocked closes when it does.
func blockFirstSpan() (p *onFirstEnd, blocked, open chan struct{}) {
	blocked, open = make(chan struct{}), make(chan struct{})
	return &onFirstEnd{first: func() { close(blocked); <-open }}, blocked, open
}

// panicFirstSpan is an onFirstEnd whose first span panics (after closing
// panicked).
func panicFirstSpan() (p *onFirstEnd, panicked chan struct{}) {
	panicked = make(chan struct{})
	return &onFirstEnd{first: func() { close(panicked); panic("provider bug") }}, panicked
}

// observerOn is an Observer recording into reader (if any) and spans into
// processor.
func observerOn(t testing.TB, reader *sdkmetric.ManualReader, processor sdktrace.SpanProcessor) *Observer {
	t.Helper()
	var meters []sdkmetric.Option
	if reader != nil {
		meters = append(meters, sdkmetric.WithReader(reader))
	}
	o, err := New(WithMeterProvider(sdkmetric.NewMeterProvider(meters...)),
		WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(processor))))
	require.NoError(t, err)
	return o
}

// plainAcquire is an acquisition's event with no nodes: the least an
// event records (a duration point and a span).
var plainAcquire = redlock.Event{Op: redlock.OpAcquire, Key: "k", Attempt: 1, Duration: time.Millisecond}

// acquisitions is how many acquisitions reader's redlock.operation.duration
// has recorded.
func acquisitions(t testing.TB, reader *sdkmetric.ManualReader) uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if m.Name != "redlock.operation.duration" || !ok {
				continue
			}
			for _, p := range h.DataPoints {
				if v, ok := p.Attributes.Value("redlock.operation"); ok && v == attribute.StringValue("acquire") {
					n += p.Count
				}
			}
		}
	}
	return n
}
