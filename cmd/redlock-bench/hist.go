package main

import (
	"math/bits"
	"time"
)

// hist is a log-linear latency histogram in the manner of HdrHistogram: 128
// linear sub-buckets per power of two, so a recorded value is known to
// within 1%, at any magnitude, in fixed memory. Percentiles are read from
// the counts, never averaged.
type hist struct {
	counts   []int64
	total    int64
	min, max time.Duration
}

const subBits = 7 // 128 sub-buckets per power of two

func newHist() *hist { return &hist{counts: make([]int64, (64-subBits)<<subBits)} }

func bucket(v int64) int {
	if v < 1<<subBits {
		return int(max(v, 0))
	}
	exp := bits.Len64(uint64(v)) - subBits - 1 // v>>exp is in [128, 256)
	return (exp+1)<<subBits + int(v>>exp) - 1<<subBits
}

// lowest returns the smallest value that falls in bucket i.
func lowest(i int) int64 {
	if i < 1<<subBits {
		return int64(i)
	}
	exp := i>>subBits - 1
	return int64(i&(1<<subBits-1)+1<<subBits) << exp
}

func (h *hist) record(d time.Duration) {
	if h.total == 0 || d < h.min {
		h.min = d
	}
	h.max = max(h.max, d)
	h.counts[bucket(int64(d))]++
	h.total++
}

func (h *hist) merge(o *hist) {
	if o.total == 0 {
		return
	}
	if h.total == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
}

// quantile returns the value at or below which a fraction q of the recorded
// values fall (nearest rank), as the top of its bucket, capped at the max.
func (h *hist) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	rank := int64(q*float64(h.total) + 0.999999999)
	rank = max(rank, 1)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(lowest(i+1)-1), h.max)
		}
	}
	return h.max
}

// cdf returns (value, fraction at or below it) points for plotting.
func (h *hist) cdf() [][2]float64 {
	var pts [][2]float64
	var seen int64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		seen += c
		top := min(time.Duration(lowest(i+1)-1), h.max)
		pts = append(pts, [2]float64{float64(top), float64(seen) / float64(h.total)})
	}
	return pts
}
