package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsAreContiguous(t *testing.T) {
	for v := int64(0); v < 1<<16; v++ {
		i := bucket(v)
		if lowest(i) > v || lowest(i+1) <= v {
			t.Fatalf("value %d in bucket %d covering [%d, %d)", v, i, lowest(i), lowest(i+1))
		}
	}
	if i := bucket(int64(time.Hour)); lowest(i) > int64(time.Hour) || lowest(i+1) <= int64(time.Hour) {
		t.Fatal("an hour is misplaced")
	}
}

func TestQuantilesWithinOnePercent(t *testing.T) {
	h := newHist()
	var vals []time.Duration
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		d := time.Duration(r.ExpFloat64() * float64(time.Millisecond))
		vals = append(vals, d)
		h.record(d)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := vals[int(q*float64(len(vals))+0.999999999)-1]
		got := h.quantile(q)
		if diff := float64(got-exact) / float64(exact); diff < 0 || diff > 0.01 {
			t.Errorf("p%v = %v, exact %v (%.2f%% off)", q*100, got, exact, diff*100)
		}
	}
	if h.quantile(1) != vals[len(vals)-1] {
		t.Errorf("max %v, want %v", h.quantile(1), vals[len(vals)-1])
	}
}
