package redlock

import "fmt"

// A Locker is made by New and a Lease by an acquisition (TryLock, Lock,
// their Multi forms) or Resume; a nil pointer or a zero value (&Locker{},
// &Lease{}) holds none of what they need: no nodes, no options, no Locker
// behind the lease. Every method says so with an error, or with the answer
// a lease that holds nothing gives (Validity 0, Done closed, Handle{}),
// never a panic nor an answer taken from zero options (a zero Locker's
// MaxTTL is 0, not the default).

// made reports why l cannot be used, if it cannot: nil, or not made by New.
func (l *Locker) made(op string) error {
	switch {
	case l == nil:
		return fmt.Errorf("redlock: %s on a nil *Locker", op)
	case len(l.nodes) == 0:
		return fmt.Errorf("redlock: %s on a Locker not made by redlock.New (a zero Locker has no nodes)", op)
	}
	return nil
}

// made reports why l cannot be used, if it cannot: nil, or not made by an
// acquisition or Resume.
func (l *Lease) made(op string) error {
	switch {
	case l == nil:
		return fmt.Errorf("redlock: %s on a nil *Lease", op)
	case l.locker == nil:
		return fmt.Errorf("redlock: %s on a Lease not made by TryLock, Lock or Resume (a zero Lease holds nothing)", op)
	}
	return nil
}

// holdsNothing reports a nil or zero lease, for the methods that answer
// without an error.
func (l *Lease) holdsNothing() bool { return l == nil || l.locker == nil }
