package drift_test

import (
	"fmt"
	"time"

	"github.com/redlock/redlock/drift"
)

// A client asked for a 10 s lease and needed 50 ms to win a majority.
func ExampleValidity() {
	ttl := 10 * time.Second
	allowance := drift.Default.Of(ttl)
	fmt.Println(allowance)
	fmt.Println(drift.Validity(ttl, 50*time.Millisecond, allowance))
	// Output:
	// 102ms
	// 9.848s
}

// Redis counts expiry in whole milliseconds, so a TTL is rounded down.
func ExampleGranted() {
	granted, px, _ := drift.Granted(1500*time.Millisecond + 700*time.Microsecond)
	fmt.Println(granted, px)
	// Output: 1.5s 1500
}
