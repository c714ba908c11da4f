// Tests written by a review that attacked the queue (otel/queue.go) in a
// copy of the tree; both failed before recordRecovering.

package redlockotel

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redlock/redlock/redlock"
)

// panicOnce is a span processor whose first OnEnd panics; it counts every
// OnEnd (the panicking one too).
type panicOnce struct {
	ended    atomic.Int64
	panicked chan struct{}
	once     sync.Once
}

func newPanicOnce() *panicOnce { return &panicOnce{panicked: make(chan struct{})} }

func (p *panicOnce) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p *panicOnce) OnEnd(sdktrace.ReadOnlySpan) {
	p.ended.Add(1)
	first := false
	p.once.Do(func() { first = true })
	if first {
		close(p.panicked)
		panic("provider bug")
	}
}
func (p *panicOnce) Shutdown(context.Context) error   { return nil }
func (p *panicOnce) ForceFlush(context.Context) error { return nil }

func attackEvent(key string) redlock.Event {
	return redlock.Event{Op: redlock.OpAcquire, Key: key, Attempt: 1, Duration: time.Millisecond}
}

// redlock.Observer's contract: "A panicking Observer does not break the
// operation it observes: the panic is recovered". With the synchronous
// adapter the Locker's emit recovered a provider's panic; recorded on the
// drain's own goroutine (a time.AfterFunc timer), the panic ended the
// process until recordRecovering. Run in a child process, which must live
// and record a later event without Flush (the queue disarmed after the
// panicking drain).
func TestAttackProviderPanicInDrainKillsProcess(t *testing.T) {
	if os.Getenv("ATTACK_CHILD") == "1" {
		p := newPanicOnce()
		o, err := New(WithMeterProvider(sdkmetric.NewMeterProvider()),
			WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))))
		if err != nil {
			os.Exit(3)
		}
		o.Observe(attackEvent("k")) // its drain (the timer's) panics in the provider
		<-p.panicked
		// A later event must still be recorded without Flush (the queue
		// must not stay armed forever after a drain's panic).
		o.Observe(attackEvent("k"))
		deadline := time.Now().Add(30 * time.Second)
		for p.ended.Load() < 2 {
			if time.Now().After(deadline) {
				os.Stdout.WriteString("CHILD: second event never recorded without Flush\n")
				os.Exit(4)
			}
			time.Sleep(time.Millisecond)
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttackProviderPanicInDrainKillsProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ATTACK_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		n := len(out)
		if n > 1500 {
			out = out[:1500]
		}
		t.Fatalf("the process observing died or lost the event (%v); a provider's panic is no longer recovered:\n%s", err, out)
	}
}

// A provider's panic during Flush: it reached Flush's caller, and the rest
// of the batch Flush had taken from the queue was never recorded ("Nothing
// is dropped"), until recordRecovering. The queue is armed as a pending timer would
// leave it (deterministic: no drain races with Flush for the batch).
func TestAttackProviderPanicInFlushDropsRestOfBatch(t *testing.T) {
	p := newPanicOnce()
	reader := sdkmetric.NewManualReader()
	o, err := New(WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))))
	require.NoError(t, err)
	o.queue.mu.Lock()
	o.queue.armed = true // a drain is scheduled (its timer not yet fired)
	o.queue.mu.Unlock()

	for range 5 {
		o.Observe(attackEvent("k"))
	}
	func() {
		defer func() { _ = recover() }()
		o.Flush()
	}()
	o.Flush()
	assert.EqualValues(t, 5, p.ended.Load(), "every observed event's span ended once")
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var count uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "redlock.operation.duration" {
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					count += dp.Count
				}
			}
		}
	}
	assert.EqualValues(t, 5, count, "every observed event's duration recorded")
}
