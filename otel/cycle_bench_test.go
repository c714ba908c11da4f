package redlockotel_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redlock/redlock/internal/benchload"
	redlockotel "github.com/redlock/redlock/otel"
	"github.com/redlock/redlock/redlock"
)

// BenchmarkCycleObserved runs lock cycles (TryLock, Unlock) from 8
// goroutines per CPU, each on a key of its own, on five in-process fake
// nodes (canned replies: the client's cost alone), with no Observer, with
// one that counts (the library's own event building), and with this
// adapter on the SDK (a manual metric reader; spans handed to a processor
// that drops them), sampling 1% of traces or all. Compare the rows within
// one run: the machines are shared.
func BenchmarkCycleObserved(b *testing.B) {
	var counted atomic.Int64
	for _, bc := range []struct {
		name     string
		observer func(b *testing.B) redlock.Observer
	}{
		{"none", func(*testing.B) redlock.Observer { return nil }},
		{"counting", func(*testing.B) redlock.Observer {
			return redlock.ObserverFunc(func(redlock.Event) { counted.Add(1) })
		}},
		{"otel-1pct", func(b *testing.B) redlock.Observer {
			return benchObserver(b, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)))
		}},
		{"otel-all", func(b *testing.B) redlock.Observer { return benchObserver(b, sdktrace.AlwaysSample()) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := redlock.New(benchload.FakeNodes(b, 5), &redlock.Options{NodeTimeout: time.Second, Observer: bc.observer(b)})
			if err != nil {
				b.Fatal(err)
			}
			benchload.ParallelCycles(b, l, context.Background())
		})
	}
}

// benchObserver is the adapter on the SDK with sampler.
func benchObserver(b *testing.B, sampler sdktrace.Sampler) redlock.Observer {
	o, err := redlockotel.New(
		redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))),
		redlockotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(dropSpans{}))))
	if err != nil {
		b.Fatal(err)
	}
	return o
}

// dropSpans receives every ended span, as an exporter's processor would,
// and keeps none.
type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }
