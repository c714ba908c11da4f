// Package drift is the arithmetic of a Redlock lease's validity: how much of
// a TTL a client may count on after it spent some of it acquiring the lock,
// allowing for clocks that do not tick at exactly the same rate; and the
// measurement of a node's clock that checks that allowance.
//
// Everything here is a pure function of its arguments, with no I/O and no
// clock; the caller passes the times it measured. The API is deliberately
// tiny and stable: Bound, Default, Granted and Validity for the arithmetic,
// with Add and Mul, the saturating sums every duration of the library is
// computed with; Estimator, fed Readings of a node's clock, for its rate and
// its Jumps.
//
// It is not a clock-synchronisation scheme. Redlock assumes that clocks of
// the client and the servers advance at nearly the same rate; the drift bound
// is how much disagreement the client tolerates. An Estimator measures the
// disagreement, so that a client can notice when a node breaks the bound; it
// never corrects a clock.
package drift

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Bound is the clock-drift allowance for a lease of a given TTL:
// ttl*Factor + Fixed.
//
// Factor covers clocks that run at slightly different rates (a server whose
// clock runs 1% fast expires the key 1% early by the client's clock). Fixed
// covers Redis's expiry precision (1 ms) plus a minimum drift of 1 ms, as the
// Redis reference implementation does.
type Bound struct {
	Factor float64
	Fixed  time.Duration
}

// Default is the reference implementation's bound: 1% of the TTL plus 2 ms.
var Default = Bound{Factor: 0.01, Fixed: 2 * time.Millisecond}

// Validate reports whether b is a usable bound: Factor in [0, 1) and Fixed >= 0.
func (b Bound) Validate() error {
	switch {
	case math.IsNaN(b.Factor) || b.Factor < 0 || b.Factor >= 1:
		return fmt.Errorf("drift: factor %v is outside [0, 1)", b.Factor)
	case b.Fixed < 0:
		return fmt.Errorf("drift: fixed allowance %v is negative", b.Fixed)
	}
	return nil
}

// Of returns the drift allowance for a lease of ttl, rounded up to the next
// nanosecond so that rounding never shortens the allowance. A ttl <= 0 has
// only the fixed allowance.
func (b Bound) Of(ttl time.Duration) time.Duration {
	var proportional time.Duration
	if ttl > 0 {
		p := math.Ceil(float64(ttl) * b.Factor)
		proportional = time.Duration(math.MaxInt64)
		if p < math.MaxInt64 { // float64(MaxInt64) rounds up to 2^63, out of range
			proportional = time.Duration(p)
		}
	}
	return Add(proportional, b.Fixed)
}

// ErrTTLTooShort reports a TTL that leaves no validity at all, even before any
// time is spent acquiring: it is under one millisecond (Redis's resolution) or
// not longer than its own drift allowance.
var ErrTTLTooShort = errors.New("drift: ttl leaves no validity")

// Granted returns the lease the server will grant for ttl: Redis counts
// expiry in whole milliseconds (PX), so ttl is rounded down to a millisecond,
// never up. It also returns that lease in milliseconds, as sent in PX.
// A ttl under one millisecond grants nothing and is ErrTTLTooShort.
func Granted(ttl time.Duration) (granted time.Duration, ms int64, err error) {
	ms = int64(ttl / time.Millisecond)
	if ms < 1 {
		return 0, 0, fmt.Errorf("%w: %v is under Redis's 1ms resolution", ErrTTLTooShort, ttl)
	}
	return time.Duration(ms) * time.Millisecond, ms, nil
}

// Check reports whether a lease of ttl can have any validity under b: it must
// be at least one millisecond once rounded down, and longer than b.Of of the
// rounded value.
func (b Bound) Check(ttl time.Duration) error {
	granted, _, err := Granted(ttl)
	if err != nil {
		return err
	}
	if d := b.Of(granted); granted <= d {
		return fmt.Errorf("%w: %v is not longer than its drift allowance %v", ErrTTLTooShort, granted, d)
	}
	return nil
}

// Validity returns how much of a lease of ttl remains after elapsed has been
// spent and drift set aside: ttl - elapsed - drift. A result <= 0 means the
// lease is already unusable.
//
// A negative elapsed or drift cannot lengthen the result (a monotonic clock
// never yields a negative elapsed time; a negative drift is a caller's bug),
// so both are treated as zero. The subtraction saturates instead of wrapping.
func Validity(ttl, elapsed, drift time.Duration) time.Duration {
	return Add(Add(ttl, -max(elapsed, 0)), -max(drift, 0))
}
