//go:build otel

package main

import (
	"context"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	redlockotel "github.com/redlock/redlock/otel"
)

// The OpenTelemetry variants of the observed implementations (observe.go),
// built with -tags otel only (optional.go says why).

func init() {
	taggedObservers["redlock-otel"] = func(c *eventCounter) error { return setUpOTel(c, sdktrace.AlwaysSample()) }
	taggedObservers["redlock-otel-1pct"] = func(c *eventCounter) error {
		return setUpOTel(c, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)))
	}
}

// setUpOTel makes the OpenTelemetry adapter, on the SDK with sampler, c's
// Observer. Its providers need no shutdown: a manual reader and a processor
// that drops run no goroutine.
func setUpOTel(c *eventCounter, sampler sdktrace.Sampler) error {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(dropSpans{}))
	o, err := redlockotel.New(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	c.next, c.tripsTo, c.flush = o, o, o.Flush
	return nil
}

// dropSpans receives every ended span, as an exporter's processor would,
// and keeps none.
type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }
