// A provider's panic while the queue (otel/queue.go) records: recovered,
// in the drain and in Flush alike, and nothing dropped. Both failed before
// recordRecovering.

package redlockotel

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// redlock.Observer's contract: "A panicking Observer does not break the
// operation it observes: the panic is recovered". With the synchronous
// adapter the Locker's emit recovered a provider's panic; recorded on the
// drain's own goroutine (a time.AfterFunc timer), the panic ended the
// process until recordRecovering. Run in a child process, which must live
// and record a later event without Flush (the queue disarmed after the
// panicking drain).
func TestAProviderPanicInTheDrainIsRecovered(t *testing.T) {
	if os.Getenv("PROVIDER_PANIC_CHILD") == "1" {
		p, panicked := panicFirstSpan()
		o := observerOn(t, nil, p)
		o.Observe(plainAcquire) // its drain (the timer's) panics in the provider
		<-panicked
		// A later event must still be recorded without Flush (the queue
		// must not stay armed forever after a drain's panic).
		o.Observe(plainAcquire)
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
	cmd := exec.Command(os.Args[0], "-test.run=^TestAProviderPanicInTheDrainIsRecovered$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PROVIDER_PANIC_CHILD=1")
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
func TestAProviderPanicInFlushLeavesTheRestOfTheBatchRecorded(t *testing.T) {
	p, _ := panicFirstSpan()
	reader := sdkmetric.NewManualReader()
	o := observerOn(t, reader, p)
	o.queue.mu.Lock()
	o.queue.armed = true // a drain is scheduled (its timer not yet fired)
	o.queue.mu.Unlock()

	for range 5 {
		o.Observe(plainAcquire)
	}
	func() {
		defer func() { _ = recover() }()
		o.Flush()
	}()
	o.Flush()
	assert.EqualValues(t, 5, p.ended.Load(), "every observed event's span ended once")
	assert.EqualValues(t, 5, acquisitions(t, reader), "every observed event's duration recorded")
}
