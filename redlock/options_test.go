package redlock_test

import (
	"reflect"
	"testing"

	"github.com/redlock/redlock/redlock"
)

// Options is a comparable struct, as it was before the test switches moved
// into it: callers may compare two Options (==), key a map by them, or
// compare them inside interfaces without a run-time panic.
func TestOptionsStayComparable(t *testing.T) {
	if !reflect.TypeFor[redlock.Options]().Comparable() {
		t.Errorf("redlock.Options is not comparable: == on two Options no longer compiles")
	}
	var a, b any = redlock.Options{Owner: "x"}, redlock.Options{Owner: "x"}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("comparing two Options held in interfaces panics: %v", r)
			}
		}()
		if a != b {
			t.Errorf("equal Options compare unequal")
		}
	}()
}
