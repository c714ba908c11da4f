package clock_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock/redlock/clock"
)

// manual is an underlying clock the test moves by hand, so rates can be
// checked exactly.
type manual struct {
	mu sync.Mutex
	t  time.Time
}

func (m *manual) Now() time.Time      { m.mu.Lock(); defer m.mu.Unlock(); return m.t }
func (m *manual) add(d time.Duration) { m.mu.Lock(); m.t = m.t.Add(d); m.mu.Unlock() }

func TestSystemIsMonotonic(t *testing.T) {
	a := clock.System{}.Now()
	// time.Time's String shows "m=+..." only when it carries a monotonic reading.
	if s := a.String(); !strings.Contains(s, " m=") {
		t.Fatalf("System.Now() = %s, want a monotonic reading", s)
	}
}

func TestFake(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	src := &manual{t: time.Unix(1000, 0)}
	f := clock.NewFakeFollowing(src, start)

	steps := []struct {
		name string
		do   func()
		want time.Duration // fake elapsed since start after the step
	}{
		{"paused at start ignores source", func() { src.add(time.Second) }, 0},
		{"advance jumps", func() { f.Advance(250 * time.Millisecond) }, 250 * time.Millisecond},
		{"resume follows source", func() { f.Resume(); src.add(time.Second) }, 1250 * time.Millisecond},
		{"skewed rate", func() { f.SetRate(1.5); src.add(time.Second) }, 2750 * time.Millisecond},
		{"slow rate", func() { f.SetRate(0.5); src.add(time.Second) }, 3250 * time.Millisecond},
		{"pause freezes", func() { f.Pause(); src.add(time.Hour) }, 3250 * time.Millisecond},
		{"advance while paused", func() { f.Advance(time.Minute) }, time.Minute + 3250*time.Millisecond},
	}
	for _, s := range steps {
		s.do()
		if got := f.Now().Sub(start); got != s.want {
			t.Fatalf("%s: elapsed %v, want %v", s.name, got, s.want)
		}
	}
}

func TestFakeRejectsBackwards(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	for name, fn := range map[string]func(){
		"negative advance": func() { f.Advance(-time.Nanosecond) },
		"negative rate":    func() { f.SetRate(-1) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			fn()
		})
	}
}

func TestFakeConcurrent(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	f.Resume()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			prev := f.Now()
			for range 1000 {
				f.Advance(time.Microsecond)
				now := f.Now()
				if now.Before(prev) {
					t.Errorf("fake clock ran backwards: %v then %v", prev, now)
					return
				}
				prev = now
			}
		})
	}
	wg.Wait()
}
