package drift_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/redlock/redlock/drift"
)

const ms = time.Millisecond

func TestBoundOf(t *testing.T) {
	tests := []struct {
		name string
		b    drift.Bound
		ttl  time.Duration
		want time.Duration
	}{
		{"default 10s", drift.Default, 10 * time.Second, 100*ms + 2*ms},
		{"default 1s", drift.Default, time.Second, 12 * ms},
		{"default tiny ttl", drift.Default, 3 * ms, 30*time.Microsecond + 2*ms},
		{"rounds proportional part up", drift.Bound{Factor: 0.01}, 1, 1},
		{"zero ttl has fixed only", drift.Default, 0, 2 * ms},
		{"negative ttl has fixed only", drift.Default, -time.Second, 2 * ms},
		{"zero bound", drift.Bound{}, time.Hour, 0},
		{"saturates", drift.Bound{Factor: 0.5, Fixed: math.MaxInt64}, time.Hour, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.Of(tt.ttl); got != tt.want {
				t.Errorf("%+v.Of(%v) = %v, want %v", tt.b, tt.ttl, got, tt.want)
			}
		})
	}
}

func TestBoundValidate(t *testing.T) {
	tests := []struct {
		b  drift.Bound
		ok bool
	}{
		{drift.Default, true},
		{drift.Bound{}, true},
		{drift.Bound{Factor: 0.999}, true},
		{drift.Bound{Factor: 1}, false},
		{drift.Bound{Factor: -0.01}, false},
		{drift.Bound{Factor: math.NaN()}, false},
		{drift.Bound{Factor: math.Inf(1)}, false},
		{drift.Bound{Fixed: -1}, false},
	}
	for _, tt := range tests {
		if err := tt.b.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", tt.b, err, tt.ok)
		}
	}
}

func TestGranted(t *testing.T) {
	tests := []struct {
		ttl     time.Duration
		granted time.Duration
		ms      int64
		short   bool
	}{
		{10 * time.Second, 10 * time.Second, 10000, false},
		{ms, ms, 1, false},
		// Never round the lease up: 1.9 ms is granted as 1 ms.
		{1900 * time.Microsecond, ms, 1, false},
		{1500*ms + 999*time.Microsecond, 1500 * ms, 1500, false},
		{999 * time.Microsecond, 0, 0, true},
		{0, 0, 0, true},
		{-time.Second, 0, 0, true},
		{math.MaxInt64, time.Duration(math.MaxInt64/int64(ms)) * ms, math.MaxInt64 / int64(ms), false},
	}
	for _, tt := range tests {
		granted, gotMS, err := drift.Granted(tt.ttl)
		if tt.short {
			if !errors.Is(err, drift.ErrTTLTooShort) {
				t.Errorf("Granted(%v) error = %v, want ErrTTLTooShort", tt.ttl, err)
			}
			continue
		}
		if err != nil || granted != tt.granted || gotMS != tt.ms {
			t.Errorf("Granted(%v) = %v, %d, %v; want %v, %d", tt.ttl, granted, gotMS, err, tt.granted, tt.ms)
		}
		if granted > tt.ttl {
			t.Errorf("Granted(%v) = %v rounds the lease up", tt.ttl, granted)
		}
	}
}

func TestBoundCheck(t *testing.T) {
	tests := []struct {
		b   drift.Bound
		ttl time.Duration
		ok  bool
	}{
		{drift.Default, 10 * time.Second, true},
		{drift.Default, 3 * ms, true},                   // 3ms > 2.03ms
		{drift.Default, 2 * ms, false},                  // 2ms <= 2.02ms
		{drift.Default, 2900 * time.Microsecond, false}, // rounds down to 2ms
		{drift.Default, 500 * time.Microsecond, false},
		{drift.Default, 0, false},
		{drift.Default, -ms, false},
		{drift.Bound{}, ms, true},
		{drift.Bound{Factor: 0.5, Fixed: 5 * ms}, 10 * ms, false}, // 10 <= 5+5
		{drift.Bound{Factor: 0.5, Fixed: 5 * ms}, 11 * ms, true},
	}
	for _, tt := range tests {
		err := tt.b.Check(tt.ttl)
		if (err == nil) != tt.ok {
			t.Errorf("%+v.Check(%v) = %v, want ok=%v", tt.b, tt.ttl, err, tt.ok)
		}
		if err != nil && !errors.Is(err, drift.ErrTTLTooShort) {
			t.Errorf("%+v.Check(%v) = %v, not ErrTTLTooShort", tt.b, tt.ttl, err)
		}
	}
}

func TestValidity(t *testing.T) {
	tests := []struct {
		name                string
		ttl, elapsed, drift time.Duration
		want                time.Duration
	}{
		{"reference example", 10 * time.Second, 50 * ms, 102 * ms, 10*time.Second - 152*ms},
		{"nothing spent", 10 * ms, 0, 0, 10 * ms},
		{"exactly used up", 10 * ms, 8 * ms, 2 * ms, 0},
		{"elapsed exceeds ttl", 10 * ms, 20 * ms, 2 * ms, -12 * ms},
		{"tiny ttl below drift", 1 * ms, 0, 2 * ms, -1 * ms},
		{"zero ttl", 0, 0, 2 * ms, -2 * ms},
		{"negative ttl", -5 * ms, 0, 0, -5 * ms},
		{"negative elapsed cannot lengthen", 10 * ms, -5 * ms, 2 * ms, 8 * ms},
		{"negative drift cannot lengthen", 10 * ms, 1 * ms, -5 * ms, 9 * ms},
		{"saturates low", math.MinInt64 + 1, time.Hour, time.Hour, math.MinInt64},
		{"huge ttl", math.MaxInt64, 1, 1, math.MaxInt64 - 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := drift.Validity(tt.ttl, tt.elapsed, tt.drift); got != tt.want {
				t.Errorf("Validity(%v, %v, %v) = %v, want %v", tt.ttl, tt.elapsed, tt.drift, got, tt.want)
			}
		})
	}
}

// FuzzValidity checks the properties every caller relies on: the result never
// exceeds ttl - max(drift,0), and spending more time never yields more validity.
func FuzzValidity(f *testing.F) {
	f.Add(int64(10*time.Second), int64(50*ms), int64(102*ms), int64(ms))
	f.Fuzz(func(t *testing.T, ttl, elapsed, d, more int64) {
		v := drift.Validity(time.Duration(ttl), time.Duration(elapsed), time.Duration(d))
		if ttl >= 0 && d >= 0 && v > time.Duration(ttl-d) {
			t.Fatalf("Validity(%d, %d, %d) = %d exceeds ttl-drift", ttl, elapsed, d, v)
		}
		if more > 0 && elapsed >= 0 && elapsed <= math.MaxInt64-more {
			if w := drift.Validity(time.Duration(ttl), time.Duration(elapsed+more), time.Duration(d)); w > v {
				t.Fatalf("more elapsed time gave more validity: %d then %d", v, w)
			}
		}
	})
}
