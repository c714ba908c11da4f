package redlockotel

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/redlock/redlock/redlock"
)

// ObserveHealth registers the per-node gauges redlock.node.rtt (s) and
// redlock.node.clock_rate ({ppm}, once measured) for l. Each collection
// calls l.Health, which reads each node's INFO and CONFIG (bounded by
// NodeTimeout): collect every few seconds at most. Unregister the returned
// registration when l is no longer used.
func (o *Observer) ObserveHealth(l *redlock.Locker) (metric.Registration, error) {
	rtt, err := o.meter.Float64ObservableGauge("redlock.node.rtt", metric.WithUnit("s"),
		metric.WithDescription("Each node's recent round trip, as the Locker measured it."))
	if err != nil {
		return nil, err
	}
	rate, err := o.meter.Float64ObservableGauge("redlock.node.clock_rate", metric.WithUnit("{ppm}"),
		metric.WithDescription("Each node's clock rate against this process's, in parts per million (positive: fast), once measured."))
	if err != nil {
		return nil, err
	}
	return o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		for _, h := range l.Health() {
			attrs := metric.WithAttributes(o.node(h.Node, h.Name).server...)
			obs.ObserveFloat64(rtt, h.RTT.Seconds(), attrs)
			if h.ClockMeasured {
				obs.ObserveFloat64(rate, h.ClockRatePPM, attrs)
			}
		}
		return nil
	}, rtt, rate)
}
