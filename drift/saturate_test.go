package drift

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// exact clamps an exact big-integer result into a Duration's range: what a
// saturating operation must return.
func exact(z *big.Int) time.Duration {
	switch {
	case z.Cmp(big.NewInt(math.MaxInt64)) > 0:
		return math.MaxInt64
	case z.Cmp(big.NewInt(math.MinInt64)) < 0:
		return math.MinInt64
	}
	return time.Duration(z.Int64())
}

// edges are the durations where sums wrap: both ends of the range and their
// neighbours, zero, and settings a caller may write as "no limit".
var edges = []time.Duration{math.MinInt64, math.MinInt64 + 1, -time.Hour, -1, 0, 1, time.Millisecond, time.Hour, math.MaxInt64/2 + 1, math.MaxInt64 - 1, math.MaxInt64}

func TestAddSaturatesInsteadOfWrapping(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pairs := [][2]time.Duration{}
	for _, a := range edges {
		for _, b := range edges {
			pairs = append(pairs, [2]time.Duration{a, b})
		}
	}
	for range 10000 {
		pairs = append(pairs, [2]time.Duration{time.Duration(r.Int64()) - time.Duration(r.Int64()), time.Duration(r.Int64())})
	}
	for _, p := range pairs {
		want := exact(new(big.Int).Add(big.NewInt(int64(p[0])), big.NewInt(int64(p[1]))))
		if got := Add(p[0], p[1]); got != want {
			t.Fatalf("Add(%d, %d) = %d, want %d", p[0], p[1], got, want)
		}
	}
}

func TestMulSaturatesInsteadOfWrapping(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ns := []int64{-1, 0, 1, 2, 3, 1 << 5, 1 << 20, math.MaxInt64}
	for range 10000 {
		ns = append(ns, r.Int64N(1<<20))
	}
	for _, d := range edges {
		for _, n := range ns {
			want := exact(new(big.Int).Mul(big.NewInt(int64(d)), big.NewInt(max(n, 0))))
			if got := Mul(d, n); got != want {
				t.Fatalf("Mul(%d, %d) = %d, want %d", d, n, got, want)
			}
		}
	}
}

func TestOfSaturatesForAnyTTL(t *testing.T) {
	b := Bound{Factor: math.Nextafter(1, 0), Fixed: math.MaxInt64}
	for _, ttl := range edges {
		if got := b.Of(ttl); got != math.MaxInt64 {
			t.Errorf("Of(%v) with the largest bound = %v, want the largest Duration", ttl, got)
		}
	}
	if got := (Bound{Factor: math.Nextafter(1, 0)}).Of(math.MaxInt64); got <= 0 {
		t.Errorf("Of(MaxInt64) with a factor just under 1 = %v, want positive", got)
	}
}
