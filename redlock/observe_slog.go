package redlock

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// NewLogObserver returns an Observer that writes one structured line per
// event to logger (slog.Default() if nil), at the level the event calls for:
//
//   - Debug: what goes as it should: an acquisition, extension, unlock or
//     check that succeeded, an attempt that found the lock held (contention
//     is the normal way to wait), a release after a failed attempt, a late
//     grant released, a node whose votes count again.
//   - Warn: what a team should know of: an operation that failed because
//     nodes failed or did not answer, a lease lost under Do, an extension
//     that found the lease gone, a failed attempt's key left to expire on
//     nodes that did not answer its release, an operator's revocation.
//   - Error: where mutual exclusion is at stake: a node quarantined, a node
//     clock alarm, an unlock that found the lock taken or gone (the lease
//     may have run out while its holder worked).
//
// Each line carries the event's fields as attributes: op, key, attempt,
// duration, token, validity, err, detail, and a "nodes" group with each
// node's outcome, latency and error, keyed by node name. Events below the
// logger's level cost one Enabled call.
func NewLogObserver(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return logObserver{logger}
}

type logObserver struct{ log *slog.Logger }

func (o logObserver) Observe(e Event) {
	ctx := context.Background()
	level := LogLevel(e)
	if !o.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs, slog.String("op", e.Op.String()))
	if e.Of != 0 {
		attrs = append(attrs, slog.String("of", e.Of.String()))
	}
	if e.Key != "" {
		attrs = append(attrs, slog.String("key", e.Key))
	}
	if e.Attempt > 0 {
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
	}
	attrs = append(attrs, slog.Duration("duration", e.Duration))
	if e.Token != 0 {
		attrs = append(attrs, slog.Uint64("token", e.Token))
	}
	if e.Validity > 0 {
		attrs = append(attrs, slog.Duration("validity", e.Validity))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("err", e.Err.Error()))
	}
	if e.Detail != "" {
		attrs = append(attrs, slog.String("detail", e.Detail))
	}
	if len(e.Nodes) > 0 {
		attrs = append(attrs, slog.Attr{Key: "nodes", Value: nodeGroups(e.Nodes)})
	}
	msg := "redlock " + e.Op.String()
	if int(e.Op) < len(logMessages) {
		msg = logMessages[e.Op]
	}
	// The Record goes to the handler directly, as slog's guide to wrapping
	// output methods does, without the caller's program counter: that
	// caller would be this adapter, never the code that took the lock,
	// and runtime.Callers was a tenth of a line's cost.
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(attrs...)
	_ = o.log.Handler().Handle(ctx, r) // nowhere to report a handler's error: slog's own methods drop it too
}

// logMessages are the lines' messages, by Op: "redlock " and the Op's name,
// made once rather than per line.
var logMessages = func() []string {
	m := make([]string, len(opNames))
	for op := range m {
		m[op] = "redlock " + Op(op).String()
	}
	return m
}()

// nodeGroups is the "nodes" group: one group per node, keyed by its name,
// with its outcome, latency and error. Every node's attributes share one
// slice (two allocations per line, not two per node).
func nodeGroups(nodes []NodeResult) slog.Value {
	fields := make([]slog.Attr, 0, 3*len(nodes))
	groups := make([]slog.Attr, len(nodes))
	for i, n := range nodes {
		from := len(fields)
		fields = append(fields, slog.String("outcome", n.Outcome.String()))
		if n.Latency > 0 {
			fields = append(fields, slog.Duration("latency", n.Latency))
		}
		if n.Err != nil {
			fields = append(fields, slog.String("err", n.Err.Error()))
		}
		groups[i] = slog.Attr{Key: n.Name, Value: slog.GroupValue(fields[from:len(fields):len(fields)]...)}
	}
	return slog.GroupValue(groups...)
}

// LogLevel is the level NewLogObserver logs e at (see there), for adapters
// of other loggers that should agree with it.
func LogLevel(e Event) slog.Level {
	switch e.Op {
	case OpQuarantine, OpClockAlarm:
		return slog.LevelError
	case OpLost, OpRevoke, OpLateFailure:
		return slog.LevelWarn
	case OpLateGrant, OpQuarantineEnd:
		return slog.LevelDebug
	}
	switch {
	case e.Err == nil:
		return slog.LevelDebug
	case e.Op == OpUnlock && errors.Is(e.Err, ErrNotHeld):
		return slog.LevelError // the lease had gone while its holder thought it held it
	case e.Op == OpAcquire && errors.Is(e.Err, ErrNotObtained):
		return slog.LevelDebug // contention: the normal way to wait
	}
	return slog.LevelWarn
}
