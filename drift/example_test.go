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

// A node's clock read three times, 100 ms apart, with 1 ms round trips;
// between the second and third reading it stepped 5 s forward (an NTP
// correction, an operator's date command): its keys expire 5 s early.
func ExampleEstimator() {
	e := drift.NewEstimator(drift.Default)
	start := time.Now() // monotonic: the readings' Sent and Received
	node := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i, step := range []time.Duration{0, 0, 5 * time.Second} {
		sent := start.Add(time.Duration(i) * 100 * time.Millisecond)
		received := sent.Add(time.Millisecond)
		at := node.Add(time.Duration(i)*100*time.Millisecond + 500*time.Microsecond + step)
		if jump, ok := e.Observe(drift.Reading{Sent: sent, Received: received, Node: at}); ok {
			fmt.Printf("reading %d: the clock jumped at least %v\n", i, jump.Size.Round(time.Millisecond))
		}
	}
	fmt.Println(e.Readings(), "readings,", e.Jumps(), "jump")
	// Output:
	// reading 2: the clock jumped at least 4.996s
	// 3 readings, 1 jump
}
