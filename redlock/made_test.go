package redlock_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlock/redlock/redlock"
)

// TestZeroValuesSayTheyWereNotMade: a Locker or Lease built as a zero value
// rather than by New or an acquisition answers every method with an error
// that says so (or the answer of a lease that holds nothing), never a panic
// nor an error taken from zero options.
func TestZeroValuesSayTheyWereNotMade(t *testing.T) {
	ctx := t.Context()
	locker := &redlock.Locker{}
	lockerCalls := map[string]func() error{
		"TryLock":      func() error { _, err := locker.TryLock(ctx, "k", time.Second); return err },
		"Lock":         func() error { _, err := locker.Lock(ctx, "k", time.Second); return err },
		"TryLockMulti": func() error { _, err := locker.TryLockMulti(ctx, []string{"a", "b"}, time.Second); return err },
		"LockMulti":    func() error { _, err := locker.LockMulti(ctx, []string{"a", "b"}, time.Second); return err },
		"Do": func() error {
			return locker.Do(ctx, "k", time.Second, func(context.Context, *redlock.Lease) error { return nil })
		},
		"Inspect":    func() error { _, err := locker.Inspect(ctx, "k"); return err },
		"Revoke":     func() error { _, err := locker.Revoke(ctx, "k"); return err },
		"Resume":     func() error { _, err := locker.Resume(ctx, redlock.Handle{}); return err },
		"Warm":       func() error { return locker.Warm(ctx) },
		"TrustNodes": func() error { return locker.TrustNodes(ctx) },
		"Drain":      func() error { return locker.Drain(ctx) },
	}
	for name, call := range lockerCalls {
		t.Run("Locker."+name, func(t *testing.T) {
			err := call()
			if err == nil || !strings.Contains(err.Error(), "not made by redlock.New") {
				t.Fatalf("err = %v, want one saying the Locker was not made by redlock.New", err)
			}
		})
	}
	if h := locker.Health(); len(h) != 0 {
		t.Errorf("Health() = %v, want none", h)
	}

	lease := &redlock.Lease{}
	leaseCalls := map[string]func() error{
		"Unlock": func() error { return lease.Unlock(ctx) },
		"Extend": func() error { return lease.Extend(ctx, time.Second) },
		"Check":  func() error { return lease.Check(ctx) },
		"Do": func() error {
			return lease.Do(ctx, time.Second, func(context.Context, *redlock.Lease) error { return nil })
		},
	}
	for name, call := range leaseCalls {
		t.Run("Lease."+name, func(t *testing.T) {
			err := call()
			if err == nil || !strings.Contains(err.Error(), "not made by TryLock, Lock or Resume") {
				t.Fatalf("err = %v, want one saying the Lease was not made by an acquisition", err)
			}
		})
	}
	if v := lease.Validity(); v != 0 {
		t.Errorf("Validity() = %v, want 0", v)
	}
	select {
	case <-lease.Done():
	default:
		t.Error("Done() is open, want closed: a zero lease holds nothing")
	}
	if h := lease.Handle(); h.Value != "" || h.Keys != nil {
		t.Errorf("Handle() = %+v, want the zero Handle", h)
	}
	if n := lease.Holders(); n != 0 {
		t.Errorf("Holders() = %d, want 0", n)
	}
	// The shorthands for the first key, and the keys (as a lease of one
	// key, the empty one, as they always answered).
	if k := lease.Key(); k != "" {
		t.Errorf("Key() = %q, want \"\"", k)
	}
	if k := lease.Keys(); !slices.Equal(k, []string{""}) {
		t.Errorf("Keys() = %q, want [\"\"]", k)
	}
	if lease.Token() != 0 || lease.TokenOf("") != 0 {
		t.Errorf("Token() = %d, TokenOf(\"\") = %d, want 0", lease.Token(), lease.TokenOf(""))
	}
}
