package guard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// TestDeclaredMaxTTLFromANodeIsBoundedInput: the MaxTTL another Locker
// declared in a node's marker sets how long this Locker quarantines the
// node after it forgets, but it is input from the node: a value above
// MaxTTLLimit (what a Locker meaning "no limit" wrote before New bounded
// it, or a marker set by hand) quarantines for MaxTTLLimit, never for a
// length that overflows into the past; a negative or unreadable one never
// shortens the Locker's own MaxTTL.
func TestDeclaredMaxTTLFromANodeIsBoundedInput(t *testing.T) {
	const own = time.Minute
	limit := MaxTTLLimit + drift.Default.Of(MaxTTLLimit)
	for _, tt := range []struct {
		field string
		left  time.Duration // the quarantine a lost memory gets, about
	}{
		{fmt.Sprint((3 * time.Minute).Milliseconds()), 3*time.Minute + drift.Default.Of(3*time.Minute)},
		{fmt.Sprint(MaxTTLLimit.Milliseconds()), limit},
		{fmt.Sprint(MaxTTLLimit.Milliseconds() + 1), limit},
		{fmt.Sprint(time.Duration(math.MaxInt64).Milliseconds()), limit}, // a Locker's MaxTTL: math.MaxInt64
		{"99999999999999999999", limit},                                  // beyond int64
		{"-5", own + drift.Default.Of(own)},
		{"0", own + drift.Default.Of(own)},
	} {
		t.Run(tt.field, func(t *testing.T) {
			ctx := t.Context()
			start := time.Now()
			fake := clock.NewFake(start)
			g := New(Config{MaxTTL: own, Bound: drift.Default, Clock: fake})
			node := &scriptedNode{began: start.Add(-48 * time.Hour), declaredField: tt.field}
			judge := func(marker string) error {
				t.Helper()
				c := g.Board(ctx, "k")
				g.AppendTo(c, []redis.Cmder{})
				sent := time.Now()
				answer(&c, marker, true, node.nodeNow())
				return g.Judge(ctx, node, c, wire.Trip{Sent: sent, Received: time.Now()})
			}
			require.NoError(t, judge(""), "first use of a memory two days old: whole")
			// The memory is lost now: quarantined for the declared length.
			node.began, node.marker = node.nodeNow(), ""
			var q *QuarantineError
			require.ErrorAs(t, judge(""), &q, "a lost memory must be quarantined")
			assert.InDelta(t, float64(tt.left), float64(q.Left), float64(time.Second))
			fake.Advance(tt.left - 2*time.Second)
			assert.Error(t, judge(node.marker), "still quarantined")
		})
	}
}

// TestQuarantineEndsAfterItBeganForAnyLength is the property behind the
// bounds: whatever the quarantine's length and drift bound (settings up to
// math.MaxInt64, a node's declaration), a quarantine ends after it began,
// never wrapped into the past, for a lost memory and a clock jump alike.
func TestQuarantineEndsAfterItBeganForAnyLength(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 43))
	durations := []time.Duration{0, 1, time.Millisecond, time.Minute, MaxTTLLimit, math.MaxInt64 / 2, math.MaxInt64 - 1, math.MaxInt64}
	for range 200 {
		durations = append(durations, time.Duration(r.Int64()))
	}
	factors := []float64{0, 0.01, 0.5, math.Nextafter(1, 0)}
	now := time.Now()
	jumps := 0
	for _, maxTTL := range durations {
		for _, fixed := range []time.Duration{0, 2 * time.Millisecond, math.MaxInt64} {
			for _, factor := range factors {
				g := New(Config{MaxTTL: maxTTL, Bound: drift.Bound{Factor: factor, Fixed: fixed}, Clock: clock.NewFake(now)})
				for _, age := range []time.Duration{math.MinInt64, -time.Hour, 0, time.Second, maxTTL, math.MaxInt64} {
					state := memoryState{examinedAt: now, age: age}
					if end := g.clearAt(state); end.Before(now) {
						t.Fatalf("MaxTTL %d, bound %v/%d, age %d: the quarantine ends at %v, before it began (%v)", maxTTL, factor, fixed, age, end, now)
					}
				}
				g.record(drift.Reading{Sent: now, Received: now, Node: now})
				g.record(drift.Reading{Sent: now.Add(time.Second), Received: now.Add(time.Second), Node: now.Add(time.Hour)})
				if g.jumpEnd.IsZero() {
					continue // a bound this wide takes no jump for one
				}
				jumps++
				if g.jumpEnd.Before(now) {
					t.Fatalf("MaxTTL %d, bound %v/%d: a clock jump's quarantine ends at %v, before it began (%v)", maxTTL, factor, fixed, g.jumpEnd, now)
				}
			}
		}
	}
	require.NotZero(t, jumps, "no clock jump was taken for one: the jump half of the property was never checked")
}

// TestMemoryThatBeganAheadOfTheNodesClockIsQuarantined: a marker whose
// memory began after the node's clock reads now (a clock that ran ahead
// when it was written and was set back since, or a marker set by hand) is
// not a memory known whole: the node is quarantined for at least MaxTTL,
// however far ahead the marker says the memory began. The age's
// subtraction saturates, so a marker centuries ahead does not wrap the
// quarantine's length into the past and let the node's votes count at
// once. Control: a memory two days old counts at once.
func TestMemoryThatBeganAheadOfTheNodesClockIsQuarantined(t *testing.T) {
	const maxTTL = time.Minute
	for _, tt := range []struct {
		name  string
		began func(now time.Time) time.Time
		whole bool
	}{
		{"control: two days ago", func(now time.Time) time.Time { return now.Add(-48 * time.Hour) }, true},
		{"an hour ahead", func(now time.Time) time.Time { return now.Add(time.Hour) }, false},
		{"three centuries ahead", func(now time.Time) time.Time { return now.AddDate(300, 0, 0) }, false},
		{"the latest a marker can say", func(time.Time) time.Time { return time.UnixMilli(math.MaxInt64) }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			start := time.Now()
			g := New(Config{MaxTTL: maxTTL, Bound: drift.Default, Clock: clock.NewFake(start)})
			node := &scriptedNode{began: tt.began(start), declared: maxTTL}
			c := g.Board(ctx, "k")
			g.AppendTo(c, []redis.Cmder{})
			sent := time.Now()
			answer(&c, "", true, node.nodeNow())
			err := g.Judge(ctx, node, c, wire.Trip{Sent: sent, Received: time.Now()})
			if tt.whole {
				require.NoError(t, err)
				return
			}
			var q *QuarantineError
			require.ErrorAs(t, err, &q, "a memory that began %v ahead of the node's clock counted at once", tt.began(start).Sub(start))
			assert.GreaterOrEqual(t, q.Left, maxTTL)
		})
	}
}
