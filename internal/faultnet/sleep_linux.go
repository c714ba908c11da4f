package faultnet

import (
	"syscall"
	"time"
)

// sleepUntil blocks until t. It calls nanosleep, which blocks this goroutine's
// thread: the runtime's timers wake an idle process through epoll, whose
// timeout is in whole milliseconds, so time.Sleep(2.98ms) often overshoots
// by most of a millisecond, which would skew a delay model of a few
// milliseconds (nanosleep overshoots by about 0.1ms here, evenly).
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(int64(d))
		if err := syscall.Nanosleep(&ts, nil); err != nil && err != syscall.EINTR {
			time.Sleep(time.Until(t))
			return
		}
	}
}
