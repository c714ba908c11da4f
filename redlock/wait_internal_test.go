package redlock

import (
	"testing"
	"time"
)

// The wait after split attempts grows with the losses in a row, up to a
// cap, and is random within its range (so that contenders fall out of
// step); no split, no extra wait.
func TestSplitBackoffGrows(t *testing.T) {
	l := &Locker{opts: Options{RetryDelay: 10 * time.Millisecond, RetryJitter: 20 * time.Millisecond}}
	if d := l.splitBackoff(0); d != 0 {
		t.Fatalf("no split: %v", d)
	}
	for split := 1; split <= 8; split++ {
		limit := 20 * time.Millisecond << min(split, 5)
		var most time.Duration
		seen := map[time.Duration]bool{}
		for range 200 {
			d := l.splitBackoff(split)
			if d < 0 || d >= limit {
				t.Fatalf("split %d: %v outside [0, %v)", split, d, limit)
			}
			most = max(most, d)
			seen[d] = true
		}
		if most < limit/2 || len(seen) < 100 {
			t.Fatalf("split %d: at most %v of %v, %d distinct values in 200: not spread over its range", split, most, limit, len(seen))
		}
	}
}
