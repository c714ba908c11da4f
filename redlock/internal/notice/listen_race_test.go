package notice_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock/internal/notice"
)

// Listen and the last Stop of the same key race: the new Listener is
// still subscribed and confirmed. (The Stop's unsubscribe, node.remove,
// run after Hub.mu is released, once could land after the new Listen's
// subscribe, node.add, leaving a live Listener whose channel was wanted on
// no node: Ready waited its full timeout and no notice came.)
func TestAListenRacingTheLastStopStaysSubscribed(t *testing.T) {
	m := redistest.Miniredis(t)
	c := client(t, m.Addr())
	var got heard
	h := notice.New([]notice.Source{notice.Subscribable(c)}, got.deliver, notice.Options{Timeout: time.Second})
	ctx := t.Context()
	for i := range 3000 {
		old := h.Listen("k")
		var fresh *notice.Listener
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); old.Stop() }()
		go func() { defer wg.Done(); fresh = h.Listen("k") }()
		wg.Wait()
		if n := fresh.Ready(ctx, 1, 500*time.Millisecond); n != 1 {
			// Still deaf afterwards: not a slow confirmation.
			time.Sleep(200 * time.Millisecond)
			t.Fatalf("iteration %d: a live Listener is confirmed on %d nodes (now %d, connections %d): its subscription was undone by the earlier Stop", i, n, h.Confirmed("k"), h.Connections())
		}
		fresh.Stop()
	}
	require.Eventually(t, func() bool { return h.Connections() == 0 }, 5*time.Second, time.Millisecond)
}
