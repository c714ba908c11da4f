package redlock

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// TestWaitsAreNeverNegativeForAnyOptions is the property behind the
// saturating sums: for any Options durations up to math.MaxInt64 that New
// accepts, every wait Lock computes from them (the poll, the split back-off,
// the hand-off window, the hand-off wait, the stagger) is never negative,
// so that a setting meant as "no limit" (a RetryDelay of math.MaxInt64 that
// relies on wake-ups) waits long instead of spinning.
func TestWaitsAreNeverNegativeForAnyOptions(t *testing.T) {
	m := redistest.Miniredis(t)
	node := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { node.Close() })
	r := rand.New(rand.NewPCG(43, 5))
	durations := []time.Duration{0, 1, time.Millisecond, time.Minute, math.MaxInt64 / 2, math.MaxInt64 - 1, math.MaxInt64}
	pick := func() time.Duration {
		if r.IntN(2) == 0 {
			return durations[r.IntN(len(durations))]
		}
		return time.Duration(r.Int64())
	}
	for trial := range 300 {
		o := Options{
			RetryDelay: pick(), RetryJitter: pick(), NodeTimeout: pick(), DriftFixed: pick() % time.Hour,
			MaxHold: pick(), MaxTTL: pick() % (MaxTTLLimit + 1), NoQuarantine: true,
		}
		l, err := New([]Node{node}, &o)
		if err != nil {
			t.Fatalf("trial %d: New(%+v): %v", trial, o, err)
		}
		if l.turns.PassedFor < 0 {
			t.Fatalf("trial %d: %+v: the hand-off window is %v", trial, o, l.turns.PassedFor)
		}
		for range 5 {
			if d := l.retryWait(); d < l.opts.RetryDelay || d < 0 {
				t.Fatalf("trial %d: %+v: the poll is %v, under RetryDelay %v", trial, o, d, l.opts.RetryDelay)
			}
		}
		for split := range 40 {
			if d := l.splitBackoff(split); d < 0 {
				t.Fatalf("trial %d: %+v: split %d's back-off is %v", trial, o, split, d)
			}
		}
		for _, poll := range durations {
			if d := l.handOffWait(poll); d < 0 {
				t.Fatalf("trial %d: %+v: the hand-off wait is %v", trial, o, d)
			}
		}
	}
}

// TestMaxTTLAboveItsLimitIsRefused: New refuses a MaxTTL above MaxTTLLimit
// and names the bound, rather than a quarantine that overflows into the
// past; the limit itself is accepted.
func TestMaxTTLAboveItsLimitIsRefused(t *testing.T) {
	m := redistest.Miniredis(t)
	node := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { node.Close() })
	for _, maxTTL := range []time.Duration{MaxTTLLimit + time.Millisecond, 290 * 365 * 24 * time.Hour, math.MaxInt64} {
		_, err := New([]Node{node}, &Options{MaxTTL: maxTTL})
		if err == nil || !strings.Contains(err.Error(), "MaxTTLLimit (24h0m0s)") {
			t.Errorf("MaxTTL %v: err = %v, want one naming MaxTTLLimit (24h0m0s)", maxTTL, err)
		}
	}
	if _, err := New([]Node{node}, &Options{MaxTTL: MaxTTLLimit}); err != nil {
		t.Errorf("MaxTTL = MaxTTLLimit: %v", err)
	}
}
