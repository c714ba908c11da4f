package redlockotel_test

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	redlockotel "github.com/redlock/redlock/otel"
	"github.com/redlock/redlock/redlock"
)

// Wiring the adapter: an Observer on the SDK's providers (here in-memory
// readers; in production, the providers your exporters use, or none to use
// the global ones), given to the Locker as its Observer. Do through the
// adapter parents the lease's operations under one "redlock do" span.
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	obs, err := redlockotel.New(
		redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		redlockotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))))
	if err != nil {
		panic(err)
	}

	var nodes []redlock.Node
	for range 3 {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			panic(err)
		}
		defer m.Close()
		_ = m.Set("redlock:memory", "0 ?") // miniredis has no INFO server: trust it, as an operator would
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		defer c.Close()
		nodes = append(nodes, c)
	}
	locker, err := redlock.New(nodes, &redlock.Options{Observer: obs})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	// Connections dialled and scripts loaded before the first lock, as in
	// production: a cold first attempt on a busy machine may miss the
	// 50 ms NodeTimeout, and the output would show its retry.
	if err := locker.Warm(ctx); err != nil {
		panic(err)
	}
	err = obs.Do(ctx, locker, "orders:42", 10*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
		return nil // the work, fenced with lease.Token() where the resource checks it
	})
	if err != nil {
		panic(err)
	}
	if err := locker.Drain(ctx); err != nil { // the Locker's background events delivered
		panic(err)
	}
	obs.Flush() // and recorded

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var names []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names = append(names, m.Name)
		}
	}
	sort.Strings(names)
	fmt.Println("metrics:", names)
	var spanNames []string
	for _, s := range spans.Ended() {
		spanNames = append(spanNames, s.Name())
	}
	sort.Strings(spanNames)
	fmt.Println("spans:", spanNames)
	// Output:
	// metrics: [db.client.operation.duration redlock.operation.duration]
	// spans: [redlock acquire redlock do redlock unlock]
}
