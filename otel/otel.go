// Package redlockotel reports a redlock.Locker's decisions to OpenTelemetry:
// metrics and spans, from the library's events (redlock.Options.Observer).
// It is a module of its own (github.com/redlock/redlock/otel), so that
// importing the library pulls in no OpenTelemetry.
//
// Metrics, lock-level under the redlock. prefix:
//
//	redlock.operation.duration  histogram, s: each acquire attempt, extend, unlock, check, revoke,
//	                            and background release; attributes redlock.operation, redlock.outcome
//	redlock.contention          counter: acquire attempts that found the lock held
//	redlock.node.unavailable    counter: node votes that failed or did not reply, including
//	                            those a decision did not wait for that failed afterwards
//	                            (redlock.operation, error.type, server.address, server.port)
//	redlock.lease.lost          counter: leases lost while Do's function ran
//	redlock.node.quarantines    counter: nodes the node guard began to keep out of the quorum
//	redlock.node.clock_alarms   counter: node clocks seen to jump or run fast
//	redlock.node.rtt            gauge, s: each node's recent round trip (ObserveHealth)
//	redlock.node.clock_rate     gauge, {ppm}: each node's measured clock rate (ObserveHealth)
//
// and each round trip to a node (redlock.RoundTripObserver) as
// OpenTelemetry's database conventions name a client call, as go-redis's
// own instrumentation does: db.client.operation.duration (s) with
// db.system.name = redis, db.operation.name (SET for a plain acquisition,
// EVALSHA for the scripts, PIPELINE for a batch of several commands, which
// a node's auto-pipeline sends under load, as go-redis names a pipeline),
// server.address, server.port, and where the trip failed error.type
// (timeout, canceled, the error reply's prefix, or _OTHER) and, for an error reply,
// db.response.status_code. Round trips are recorded whether or not a
// decision waited for them: a node slower than the majority shows there.
//
// Both histograms advise bucket boundaries from 100 µs to 10 s.
//
// Spans: one per lock operation ("redlock acquire", ...), started at the
// operation's start (its end less the event's Duration), with an event per node
// (its outcome, latency and error). Observe has no context, so these spans
// are roots, unless the operation ran under this package's Do, which starts
// a "redlock do" span for the whole of Do and parents the operations of its
// key under it.
//
// Observe queues each event and returns: the events are recorded in
// batches off the lock's path, within milliseconds. Flush records what is
// queued: call it before reading what the events recorded, and before
// shutting the providers down.
package redlockotel

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/redlock/redlock/otel"

// Option configures New.
type Option func(*config)

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
}

// WithMeterProvider sets the meter provider (default: otel.GetMeterProvider()).
func WithMeterProvider(p metric.MeterProvider) Option { return func(c *config) { c.meters = p } }

// WithTracerProvider sets the tracer provider (default: otel.GetTracerProvider()).
func WithTracerProvider(p trace.TracerProvider) Option { return func(c *config) { c.tracers = p } }

// Observer is a redlock.Observer that records metrics and spans. Give it to
// redlock.Options.Observer. Observe queues each event and returns; the
// events are recorded in batches off the lock's path, within milliseconds
// (queue.go). Call Flush before reading what they recorded, and before
// shutting the providers down.
type Observer struct {
	queue queue // events observed, not yet recorded

	meter  metric.Meter
	tracer trace.Tracer

	duration    metric.Float64Histogram
	dbDuration  metric.Float64Histogram
	contention  metric.Int64Counter
	unavailable metric.Int64Counter
	lost        metric.Int64Counter
	quarantines metric.Int64Counter
	clockAlarms metric.Int64Counter

	// The attribute sets of the common cases, made once rather than per
	// event (a set is sorted and allocated when made): by operation and
	// outcome, and per node (nodeSets).
	durationSets [][]metric.RecordOption // [op][outcome]: the attribute set, as a ready option list
	nodesMu      sync.Mutex
	nodeSets     map[string]*nodeSets // by node name, under nodesMu
	// byIndex is nodeSets by the nodes' index (NodeResult.Node), replaced
	// whole when a node is added: the lookup on every node of every event
	// takes no lock (a read-write mutex shared by every client goroutine
	// was a tenth of the adapter's time under load).
	byIndex atomic.Pointer[[]*nodeSets]

	dos   sync.Map     // key -> *doSpan: the Do running on the key, whose span parents its operations
	doing atomic.Int64 // Do calls running: no lookup in dos while there are none
}

// nodeSets are one node's attribute sets: server.address and server.port,
// db.client.operation.duration's of a round trip that went well by its
// db.operation.name, and redlock.node.unavailable's by operation and
// error.type.
type nodeSets struct {
	name   string
	server []attribute.KeyValue
	trips  map[string][]metric.RecordOption // by db.operation.name: SET, EVALSHA, PIPELINE, and others as they come (under Observer.nodesMu)
	set    []metric.RecordOption            // trips["SET"], looked up without a lock
	script []metric.RecordOption            // trips["EVALSHA"]
	batch  []metric.RecordOption            // trips["PIPELINE"]
	failed [][]metric.AddOption             // [op][errorTypes index]
}

var _ redlock.RoundTripObserver = (*Observer)(nil)

// New returns an Observer whose instruments are created once, here.
func New(opts ...Option) (*Observer, error) {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	if c.meters == nil {
		c.meters = otel.GetMeterProvider()
	}
	if c.tracers == nil {
		c.tracers = otel.GetTracerProvider()
	}
	o := &Observer{meter: c.meters.Meter(ScopeName), tracer: c.tracers.Tracer(ScopeName)}
	m := o.meter
	var errs [7]error
	o.duration, errs[0] = m.Float64Histogram("redlock.operation.duration", metric.WithUnit("s"), durationBounds,
		metric.WithDescription("Duration of lock operations: each acquire attempt, extend, unlock, check, revoke, background release."))
	o.dbDuration, errs[1] = m.Float64Histogram("db.client.operation.duration", metric.WithUnit("s"), durationBounds,
		metric.WithDescription("Duration of each node's round trip in a lock operation."))
	o.contention, errs[2] = m.Int64Counter("redlock.contention", metric.WithUnit("{attempt}"),
		metric.WithDescription("Acquire attempts that found the lock held by another holder."))
	o.unavailable, errs[3] = m.Int64Counter("redlock.node.unavailable", metric.WithUnit("{vote}"),
		metric.WithDescription("Node votes that failed or did not reply before the decision's deadline."))
	o.lost, errs[4] = m.Int64Counter("redlock.lease.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost while Do's function ran."))
	o.quarantines, errs[5] = m.Int64Counter("redlock.node.quarantines", metric.WithUnit("{quarantine}"),
		metric.WithDescription("Nodes the node guard began to keep out of the quorum."))
	o.clockAlarms, errs[6] = m.Int64Counter("redlock.node.clock_alarms", metric.WithUnit("{alarm}"),
		metric.WithDescription("Node clocks seen to jump, or to run faster than the drift bound allows."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	ops := redlock.Ops()
	o.durationSets = make([][]metric.RecordOption, int(ops[len(ops)-1])+1)
	for _, op := range ops {
		o.durationSets[op] = make([]metric.RecordOption, len(outcomes))
		for i, outcome := range outcomes {
			o.durationSets[op][i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("redlock.operation", op.String()), attribute.String("redlock.outcome", outcome)))
		}
	}
	o.nodeSets = map[string]*nodeSets{}
	return o, nil
}

// durationBounds are the bucket boundaries, in seconds, that both duration
// histograms advise (a View may set others): from 100 µs, a round trip on
// one host, to 10 s. The SDK's default boundaries (0, 5, 10, 25, ... 10000)
// are for milliseconds; in seconds they put every lock operation and round
// trip under 5 s into one bucket. The database conventions advise
// 0.001 to 10 for db.client.operation.duration; a lock's round trips within
// a data centre are mostly under 1 ms, so these start lower.
var durationBounds = metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

// outcomes are the values of redlock.outcome (see Outcome), by index.
var outcomes = []string{"ok", "lost", "contention", "not_held", "canceled", "unavailable", "error"}

// Outcome names how an event ended, as the redlock.outcome attribute says
// it: ok, contention, unavailable (nodes failed or did not reply), not_held
// (the lease was gone), lost, canceled (the caller's context), or error.
func Outcome(e redlock.Event) string { return outcomes[outcomeOf(e)] }

// outcomeOf is Outcome's index in outcomes.
func outcomeOf(e redlock.Event) int {
	switch err := e.Err; {
	case err == nil:
		return 0
	case errors.Is(err, redlock.ErrLost):
		return 1
	case errors.Is(err, redlock.ErrNotObtained):
		return 2
	case errors.Is(err, redlock.ErrNotHeld):
		return 3
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return 4
	}
	var q *redlock.QuorumError
	if errors.As(e.Err, &q) {
		return 5
	}
	return 6
}

// record records an observed event (its metrics and its span), or a round
// trip.
func (o *Observer) record(p *pending) {
	ctx := context.Background()
	if p.isTrip {
		o.roundTrip(ctx, &p.trip)
		return
	}
	e := p.e
	outcome := outcomeOf(e)
	switch e.Op {
	case redlock.OpAcquire, redlock.OpExtend, redlock.OpUnlock, redlock.OpCheck, redlock.OpRevoke, redlock.OpRelease, redlock.OpResume:
		if int(e.Op) < len(o.durationSets) {
			o.duration.Record(ctx, e.Duration.Seconds(), o.durationSets[e.Op][outcome:outcome+1]...)
		}
		o.nodes(ctx, e)
	case redlock.OpLost:
		o.lost.Add(ctx, 1)
	case redlock.OpQuarantine:
		o.quarantines.Add(ctx, 1, metric.WithAttributes(o.serverOf(e.Nodes)...))
	case redlock.OpClockAlarm:
		o.clockAlarms.Add(ctx, 1, metric.WithAttributes(o.serverOf(e.Nodes)...))
	case redlock.OpLateFailure: // nodes the decision did not wait for, failed since
		for _, n := range e.Nodes {
			o.unavailable.Add(ctx, 1, o.node(n.Node, n.Name).failed[e.Of][errorType(n.Err)])
		}
	}
	if e.Op == redlock.OpAcquire && outcome == 2 {
		o.contention.Add(ctx, 1)
	}
	o.span(e, outcome, p.end, p.parent)
}

// nodes counts the nodes whose votes failed, by error.type. Each node's
// round trips are recorded as they come back (roundTrip), not here: an
// event has none for a node its decision did not wait for.
func (o *Observer) nodes(ctx context.Context, e redlock.Event) {
	for _, n := range e.Nodes {
		if n.Outcome == redlock.Failed && n.Err != nil {
			o.unavailable.Add(ctx, 1, o.node(n.Node, n.Name).failed[e.Op][errorType(n.Err)])
		}
	}
}

// roundTrip records t as db.client.operation.duration: db.operation.name is
// its command's (SET, EVALSHA), or PIPELINE where it carried several, as
// go-redis's own instrumentation names a pipeline; error.type and, for the
// node's error reply, db.response.status_code where it failed.
func (o *Observer) roundTrip(ctx context.Context, t *redlock.RoundTrip) {
	sets := o.node(t.Node, t.Name)
	name := dbOperationName(t)
	if t.Err != nil {
		attrs := tripAttrs(sets.server, name, attribute.String("error.type", tripErrorType(t.Err)))
		if code := statusCode(t.Err); code != "" {
			attrs = append(attrs, attribute.String("db.response.status_code", code))
		}
		o.dbDuration.Record(ctx, t.Duration.Seconds(), metric.WithAttributes(attrs...))
		return
	}
	var opts []metric.RecordOption
	switch name {
	case "PIPELINE":
		opts = sets.batch
	case "SET":
		opts = sets.set
	case "EVALSHA":
		opts = sets.script
	default:
		opts = o.tripSet(sets, name)
	}
	o.dbDuration.Record(ctx, t.Duration.Seconds(), opts...)
}

// tripAttrs are the attributes of a round trip named name to the server
// whose attributes are server, and extra.
func tripAttrs(server []attribute.KeyValue, name string, extra ...attribute.KeyValue) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 2+len(server)+len(extra)+1) // and room for a status code
	attrs = append(attrs, attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", name))
	attrs = append(attrs, server...)
	return append(attrs, extra...)
}

// tripOption is the attribute set of a round trip that went well, named
// name, to the server whose attributes are server: made once per node and
// name (a set is sorted and allocated when made).
func tripOption(server []attribute.KeyValue, name string) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(tripAttrs(server, name)...))}
}

// dbOperationName is db.operation.name of t: PIPELINE for a batch of
// commands, else its command's name in upper case, as Redis documents them.
func dbOperationName(t *redlock.RoundTrip) string {
	switch {
	case t.Commands > 1:
		return "PIPELINE"
	case t.Command == "set":
		return "SET"
	case t.Command == "evalsha":
		return "EVALSHA"
	}
	return strings.ToUpper(t.Command)
}

// tripSet is the attribute set of a round trip of node n that went well,
// named name, made on its first use.
func (o *Observer) tripSet(n *nodeSets, name string) []metric.RecordOption {
	o.nodesMu.Lock()
	defer o.nodesMu.Unlock()
	opts, ok := n.trips[name]
	if !ok {
		opts = tripOption(n.server, name)
		n.trips[name] = opts
	}
	return opts
}

// node returns the attribute sets of the node named name, index i in its
// Locker, made on its first event. One Observer may serve Lockers whose
// nodes differ: the index is a hint, the name decides.
func (o *Observer) node(i int, name string) *nodeSets {
	if s := o.byIndex.Load(); s != nil && i >= 0 && i < len(*s) {
		if n := (*s)[i]; n != nil && n.name == name {
			return n
		}
	}
	o.nodesMu.Lock()
	defer o.nodesMu.Unlock()
	n, ok := o.nodeSets[name]
	if !ok {
		n = newNodeSets(name, len(o.durationSets))
		o.nodeSets[name] = n
	}
	if i >= 0 && i < 1024 { // a node index, not a stray number: keep the slice small
		var s []*nodeSets
		if old := o.byIndex.Load(); old != nil {
			s = append(s, *old...)
		}
		for len(s) <= i {
			s = append(s, nil)
		}
		s[i] = n
		o.byIndex.Store(&s)
	}
	return n
}

// newNodeSets makes the attribute sets of the node named name, for ops
// operations.
func newNodeSets(name string, ops int) *nodeSets {
	n := &nodeSets{name: name, server: serverAttrs(name), trips: map[string][]metric.RecordOption{}, failed: make([][]metric.AddOption, ops)}
	for _, op := range []string{"SET", "EVALSHA", "PIPELINE"} {
		n.trips[op] = tripOption(n.server, op)
	}
	n.set, n.script, n.batch = n.trips["SET"], n.trips["EVALSHA"], n.trips["PIPELINE"]
	for op := range ops {
		n.failed[op] = make([]metric.AddOption, len(errorTypes))
		for i, errType := range errorTypes {
			n.failed[op][i] = metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{
				attribute.String("redlock.operation", redlock.Op(op).String()),
				attribute.String("error.type", errType),
			}, n.server...)...))
		}
	}
	return n
}

// errorTypes are the values of error.type on redlock.node.unavailable
// (errorType's results, by index): timeout where the node did not reply
// in time, quarantined, NOPERM for an ACL refusal, not_replicated, else
// _OTHER (the convention's value when no better one is known).
var errorTypes = []string{"timeout", "quarantined", "NOPERM", "not_replicated", "_OTHER"}

// errorType is the index in errorTypes of a node's failed vote.
func errorType(err error) int {
	switch {
	case errors.Is(err, quorum.ErrNoReply), errors.Is(err, context.DeadlineExceeded):
		return 0
	case errors.Is(err, redlock.ErrNodeQuarantined):
		return 1
	case errors.Is(err, redlock.ErrNoPermission):
		return 2
	case errors.Is(err, redlock.ErrNotReplicated):
		return 3
	}
	return 4
}

// tripErrorType is error.type of a failed round trip: timeout where no
// reply came in time, canceled where the caller's context ended the call,
// the error reply's prefix (NOPERM, READONLY, ...)
// where the node refused, else _OTHER (a refused connection, a dial that
// failed).
func tripErrorType(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, quorum.ErrNoReply), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled" // the caller's context ended the call
	}
	if code := statusCode(err); code != "" {
		return code
	}
	return "_OTHER"
}

// statusCode is db.response.status_code of a round trip that failed on
// the node's error reply: the reply's prefix, in upper case by Redis's
// convention ("NOPERM", "READONLY"); "" for other failures.
func statusCode(err error) string {
	var reply interface {
		error
		RedisError()
	}
	if !errors.As(err, &reply) {
		return ""
	}
	prefix, _, _ := strings.Cut(reply.Error(), " ")
	if prefix == "" || strings.ToUpper(prefix) != prefix {
		return ""
	}
	return prefix
}

// serverOf is server.address and server.port of the first of nodes.
func (o *Observer) serverOf(nodes []redlock.NodeResult) []attribute.KeyValue {
	if len(nodes) == 0 {
		return nil
	}
	return o.node(nodes[0].Node, nodes[0].Name).server
}

// serverAttrs is server.address and server.port of a node named as the
// library names nodes, "node 2 (127.0.0.1:6379)"; none where no address is
// known.
func serverAttrs(name string) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	if open, end := strings.IndexByte(name, '('), strings.LastIndexByte(name, ')'); open >= 0 && end > open {
		if host, port, err := net.SplitHostPort(name[open+1 : end]); err == nil {
			attrs = append(attrs, attribute.String("server.address", host))
			if p, err := strconv.Atoi(port); err == nil {
				attrs = append(attrs, attribute.Int("server.port", p))
			}
		}
	}
	return attrs
}
