package redlockotel

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlock/redlock/redlock"
)

// parentOf is the context whose span parents an event about key, read
// when the event is observed (the Do may have ended by the time it is
// recorded): the adapter's Do running on key, else none (a root span).
func (o *Observer) parentOf(key string) context.Context {
	if key != "" && o.doing.Load() > 0 {
		if d, ok := o.dos.Load(key); ok {
			return d.(*doSpan).ctx
		}
	}
	return context.Background()
}

// span records e, observed at end, as a span that began e.Duration before
// end, under parent. Its attributes and node events are made only where
// the span records (a sampler may have left it out), so that they are set
// after its start: a sampler sees only the span's name and kind.
func (o *Observer) span(e redlock.Event, outcome int, end time.Time, parent context.Context) {
	var name string
	if int(e.Op) < len(spanNames) {
		name = spanNames[e.Op]
	} else {
		name = "redlock " + e.Op.String()
	}
	_, s := o.tracer.Start(parent, name, trace.WithTimestamp(end.Add(-e.Duration)), clientKind)
	if !s.IsRecording() {
		s.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, attribute.String("redlock.outcome", outcomes[outcome]))
	if e.Key != "" {
		attrs = append(attrs, attribute.String("redlock.key", e.Key))
	}
	if e.Attempt > 0 {
		attrs = append(attrs, attribute.Int("redlock.attempt", e.Attempt))
	}
	if e.Token != 0 {
		attrs = append(attrs, attribute.String("redlock.token", strconv.FormatUint(e.Token, 10)))
	}
	if e.Validity > 0 {
		attrs = append(attrs, attribute.Float64("redlock.validity", e.Validity.Seconds()))
	}
	if e.Detail != "" {
		attrs = append(attrs, attribute.String("redlock.detail", e.Detail))
	}
	s.SetAttributes(attrs...)
	at := trace.WithTimestamp(end)
	fields := make([]attribute.KeyValue, 0, 4*len(e.Nodes)) // every node's, in one slice
	for _, n := range e.Nodes {
		from := len(fields)
		fields = append(fields, attribute.String("redlock.node", n.Name), attribute.String("redlock.node.outcome", n.Outcome.String()))
		if n.Latency > 0 {
			fields = append(fields, attribute.Float64("redlock.node.latency", n.Latency.Seconds()))
		}
		if n.Err != nil {
			fields = append(fields, attribute.String("error.message", n.Err.Error()))
		}
		s.AddEvent("node", at, trace.WithAttributes(fields[from:]...))
	}
	if e.Err != nil && outcome != 2 { // contention is no error
		s.SetStatus(codes.Error, e.Err.Error())
	}
	s.End(at)
}

// spanNames are the spans' names by Op, made once.
var spanNames = func() []string {
	ops := redlock.Ops()
	names := make([]string, int(ops[len(ops)-1])+1)
	for _, op := range ops {
		names[op] = "redlock " + op.String()
	}
	return names
}()

// clientKind is the spans' kind, as an option made once.
var clientKind = trace.WithSpanKind(trace.SpanKindClient)

// doSpan is a Do in progress, whose span parents its key's operations.
type doSpan struct{ ctx context.Context }

// Do runs l.Do(ctx, key, ttl, fn) inside a "redlock do" span, which parents
// the operations of key that l's events report meanwhile (when l's Observer
// is o) and ends with Do's error. fn's context carries the span. Two Do
// calls on one key at once in one process (one holds, one waits) share the
// later one's span as parent.
func (o *Observer) Do(ctx context.Context, l *redlock.Locker, key string, ttl time.Duration, fn func(context.Context, *redlock.Lease) error) error {
	ctx, s := o.tracer.Start(ctx, "redlock do", trace.WithAttributes(attribute.String("redlock.key", key)))
	d := &doSpan{ctx: ctx}
	o.doing.Add(1)
	o.dos.Store(key, d)
	err := l.Do(ctx, key, ttl, fn)
	o.dos.CompareAndDelete(key, d)
	o.doing.Add(-1)
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
	return err
}
