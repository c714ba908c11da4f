package clock

import (
	"fmt"
	"sync"
	"time"
)

// Fake is a Clock for tests. It follows an underlying clock at a settable
// rate: rate 1 runs in step with it, 0 is paused, 1.01 runs one percent fast
// (a client whose clock drifts), and Advance jumps forward at once (a process
// that was paused, or a clock that leapt).
//
// A Fake never runs backwards: like a monotonic clock, its readings only grow.
// The zero value is not usable; call NewFake.
type Fake struct {
	mu     sync.Mutex
	source Clock     // what the fake follows while it runs
	anchor time.Time // source reading when rate last changed
	at     time.Time // fake reading at anchor
	rate   float64
}

// NewFake returns a Fake that reads start and is paused (rate 0), so that it
// moves only when the test calls Advance. Call SetRate(1) to let it follow the
// system clock.
func NewFake(start time.Time) *Fake {
	return NewFakeFollowing(System{}, start)
}

// NewFakeFollowing is NewFake with an explicit underlying clock.
func NewFakeFollowing(source Clock, start time.Time) *Fake {
	return &Fake{source: source, anchor: source.Now(), at: start}
}

// Now returns the fake reading.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nowLocked(f.source.Now())
}

func (f *Fake) nowLocked(src time.Time) time.Time {
	if f.rate == 0 {
		return f.at
	}
	return f.at.Add(time.Duration(float64(src.Sub(f.anchor)) * f.rate))
}

// Advance moves the fake forward by d at once. It panics if d is negative,
// since a monotonic clock cannot run backwards.
func (f *Fake) Advance(d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("clock: Fake.Advance(%v): a monotonic clock cannot run backwards", d))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	src := f.source.Now()
	f.at = f.nowLocked(src).Add(d)
	f.anchor = src
}

// SetRate makes the fake run at rate times the underlying clock from now on.
// It panics if rate is negative or not a number.
func (f *Fake) SetRate(rate float64) {
	if !(rate >= 0) {
		panic(fmt.Sprintf("clock: Fake.SetRate(%v): rate must be >= 0", rate))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	src := f.source.Now()
	f.at = f.nowLocked(src)
	f.anchor = src
	f.rate = rate
}

// Pause stops the fake; it is SetRate(0).
func (f *Fake) Pause() { f.SetRate(0) }

// Resume lets the fake run in step with its underlying clock; it is SetRate(1).
func (f *Fake) Resume() { f.SetRate(1) }
