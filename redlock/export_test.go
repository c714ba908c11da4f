package redlock

// Waiting is how many Lock calls of l wait for key in its queue (package waitq),
// for the tests of waiting.
func Waiting(l *Locker, key string) int { return l.turns.Waiting(key) }

// NoSplitBackoff turns off the growing wait after attempts that split the
// nodes (Locker.splitBackoff), for the livelock test's control; the
// returned function restores it.
func NoSplitBackoff() (restore func()) {
	splitBackoffOff.Store(true)
	return func() { splitBackoffOff.Store(false) }
}
