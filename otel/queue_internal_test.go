package redlockotel

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A provider that is slow to take a span does not slow the lock it
// observes: Observe returns while the recording waits, and Flush records
// everything once the provider goes on. (A synchronous adapter would block
// the second Observe, the lock operation's own goroutine, until the
// provider went on.)
func TestObserveDoesNotWaitForTheProviders(t *testing.T) {
	gate, blocked, open := blockFirstSpan()
	o := observerOn(t, nil, gate)
	e := plainAcquire

	o.Observe(e)
	flushed := make(chan struct{})
	go func() { o.Flush(); close(flushed) }() // records the event, and blocks in the provider
	<-blocked

	observed := make(chan struct{})
	go func() { o.Observe(e); close(observed) }()
	select {
	case <-observed:
	case <-time.After(30 * time.Second): // a hang detector, not a speed target
		t.Fatal("Observe waited for the provider")
	}
	select {
	case <-flushed:
		t.Fatal("Flush returned before its event was recorded")
	default:
	}
	close(open)
	<-flushed
	o.Flush()
	assert.EqualValues(t, 2, gate.ended.Load(), "both spans")
}

// While the drain is stuck in a provider, the queue holds at most
// maxQueued events: Observe records the rest itself, so that memory stays
// bounded and no event is dropped.
func TestQueueStaysBoundedWhenRecordingFallsBehind(t *testing.T) {
	gate, blocked, open := blockFirstSpan()
	o := observerOn(t, nil, gate)
	e := plainAcquire

	for range drainBatch { // a full batch starts the drain, which sticks on its first span
		o.Observe(e)
	}
	<-blocked
	const extra = 100
	longest := 0
	for range maxQueued + extra {
		o.Observe(e)
		o.queue.mu.Lock()
		longest = max(longest, len(o.queue.items))
		o.queue.mu.Unlock()
	}
	assert.Equal(t, maxQueued, longest, "the queue filled to its bound, and no further")
	assert.GreaterOrEqual(t, gate.ended.Load(), int64(extra+1), "the events past the bound were recorded by Observe itself (and the drain's first)")

	close(open)
	o.Flush()
	assert.EqualValues(t, drainBatch+maxQueued+extra, gate.ended.Load(), "every event recorded once")
	o.queue.mu.Lock()
	defer o.queue.mu.Unlock()
	assert.Empty(t, o.queue.items)
}
