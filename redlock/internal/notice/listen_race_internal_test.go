package notice

// Internal views of a live Listener's subscription under two races: a
// Listen against the key's last Stop (as in
// TestAListenRacingTheLastStopStaysSubscribed), and a new channel's
// confirmation against conn.step. They say what node and conn hold if the
// Listener stays unconfirmed.

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

func miniredisHub(t *testing.T) (*Hub, *miniredis.Miniredis) {
	m := redistest.Miniredis(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return New([]Source{Subscribable(c)}, func(string, Turn, bool) {}, Options{Timeout: time.Second}), m
}

// A new first Listen racing the last Stop: the new Listener's channel
// stays wanted on the node (node.byChan has its entry) while the Hub
// counts it listened. (The last Stop's node.remove once ran after the new
// Listen's node.add: the channel was wanted nowhere though the Hub counted
// it listened, refs 1, and every later Listener of the key, while any was
// held, shared that non-subscription.)
func TestAListenRacingTheLastStopKeepsItsChannelWanted(t *testing.T) {
	h, _ := miniredisHub(t)
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		old := h.Listen("k")
		var fresh *Listener
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); old.Stop() }()
		go func() { defer wg.Done(); fresh = h.Listen("k") }()
		wg.Wait()
		// Listen adds the channel to the node in the background: give the
		// add (and any late remove) a second to land.
		refs, wanted := 0, false
		for end := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
			h.mu.Lock()
			refs = 0
			if k := h.keys["k"]; k != nil {
				refs = k.refs
			}
			h.mu.Unlock()
			nd := h.nodes[0]
			nd.mu.Lock()
			_, wanted = nd.byChan[fresh.channel]
			nd.mu.Unlock()
			if wanted || time.Now().After(end) {
				break
			}
		}
		if refs == 1 && !wanted {
			second := h.Listen("k") // another waiter joins: shares the hole
			got := second.Ready(t.Context(), 1, 300*time.Millisecond)
			t.Fatalf("iteration %d: key listened (refs %d) but its channel is wanted on no node; a later Listener's Ready got %d after its full timeout", i, refs, got)
		}
		fresh.Stop()
	}
}

// A new channel's confirmation that reaches the reader before conn.step
// marks it sent still confirms it. (It was once dropped: want and sent
// were true, the server had the subscription, and confirmed stayed false
// for as long as the connection lived.)
func TestAConfirmationBeforeTheChannelIsMarkedSentIsKept(t *testing.T) {
	h, m := miniredisHub(t)
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		l := h.Listen("key" + strconv.Itoa(i))
		if n := l.Ready(t.Context(), 1, 500*time.Millisecond); n != 1 {
			nd := h.nodes[0]
			nd.mu.Lock()
			cn := nd.byChan[l.channel]
			nd.mu.Unlock()
			cn.mu.Lock()
			defer cn.mu.Unlock()
			t.Fatalf("key %d: want=%v sent=%v confirmed=%v, server subscribed=%v", i, cn.want[l.channel], cn.sent[l.channel], cn.confirmed[l.channel], len(m.PubSubChannels(l.channel)) == 1)
		}
	}
}
