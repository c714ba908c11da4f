package drift

import (
	"math"
	"time"
)

// Add returns a+b, or the largest (smallest) Duration where the sum would
// overflow (underflow) instead of wrapping around.
//
// A Duration holds about 292 years, and settings meant as "no limit" (a
// retry delay of math.MaxInt64 that relies on wake-ups, a node timeout
// left huge) reach its end: a wrapped sum turns a quarantine's end, a
// deadline or a wait into the past, which is a lock granted too early or a
// loop that spins. Every sum of durations that come from settings or from
// a node goes through Add or Mul.
func Add(a, b time.Duration) time.Duration {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// Mul returns d*n for n >= 0, or the largest (smallest) Duration where the
// product would overflow: the saturating form of d*n and of d<<k (n = 1<<k).
// A negative n counts as zero.
func Mul(d time.Duration, n int64) time.Duration {
	switch {
	case n <= 0 || d == 0:
		return 0
	case d > 0 && d > math.MaxInt64/time.Duration(n):
		return math.MaxInt64
	case d < 0 && d < math.MinInt64/time.Duration(n):
		return math.MinInt64
	}
	return d * time.Duration(n)
}
