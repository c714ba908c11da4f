// Package clock is the monotonic clock the lock coordinator reads, and a fake
// of it that tests can advance, pause and skew.
//
// The coordinator measures how long an acquisition took and how long a lease
// has left. Both are differences of two readings of one process's monotonic
// clock, so a wall-clock step (NTP, an operator, a VM restore) cannot lengthen
// a lease. Readings are never serialized, rounded or rebuilt from Unix time:
// that would strip the monotonic reading Go keeps inside time.Time.
//
// The API is deliberately tiny: Clock, System and Fake. It is not a scheduler
// and has no timers; code that waits uses real timers, and tests that must
// control those use testing/synctest.
package clock

import "time"

// Clock reports the current time. Implementations must return readings that
// carry Go's monotonic clock (as time.Now does), so that Sub between two
// readings is immune to wall-clock steps.
type Clock interface {
	Now() time.Time
}

// System is the process's real clock: time.Now, with its monotonic reading.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }
