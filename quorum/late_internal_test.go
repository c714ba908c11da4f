package quorum

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// A caller stalled across its deadline (its host starved it, a GC paused
// it) sees its timer fire late, and so late replies that may have waited
// unread since before the deadline: after an early reply, the nodes still
// out get as long again as the caller was late, within the grace. A
// caller late by no more than an eighth of wait is running, and a silent
// node fails as it would have.
// Fake time (synctest) makes each moment exact; lateTimer delays the
// caller's handling of its timer, as a stall does.
func TestDecideWithinWaitsAsLongAsTheCallerWasLate(t *testing.T) {
	const wait, grace = 50 * time.Millisecond, 450 * time.Millisecond
	never := time.Duration(-1)
	for _, tc := range []struct {
		name    string
		replies []time.Duration // when each node replies (never: hung); node 1 refuses
		late    time.Duration   // how late the caller handles its timer
		wantAt  time.Duration
		wantWon bool
		errs    []error // each node's error, where it had not replied
	}{
		{"a reply read just after the caller's stall counts", []time.Duration{time.Millisecond, never, 81 * time.Millisecond}, 30 * time.Millisecond, 81 * time.Millisecond, true, nil},
		{"hung nodes get as long again as the caller was late", []time.Duration{time.Millisecond, never, never}, 30 * time.Millisecond, 110 * time.Millisecond, false, []error{nil, ErrNoReply, ErrNoReply}},
		{"a caller late by an eighth of wait or less is not stalled", []time.Duration{time.Millisecond, never, 60 * time.Millisecond}, wait / 8, wait + wait/8, false, []error{nil, ErrNoReply, ErrNoReply}},
		{"the lateness is bounded by the grace", []time.Duration{time.Millisecond, never, never}, 400 * time.Millisecond, wait + grace, false, []error{nil, ErrNoReply, ErrNoReply}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				round := Start(len(tc.replies), func(i int) (bool, error) {
					if tc.replies[i] == never {
						<-release
						return true, nil
					}
					time.Sleep(tc.replies[i])
					return i != 1, nil
				})
				stalled := false // one stall, across the first deadline
				round.lateTimer = func() {
					if !stalled {
						stalled = true
						time.Sleep(tc.late)
					}
				}
				start := time.Now()
				tally := round.DecideWithin(t.Context(), wait, grace, func(v bool, err error) bool { return err == nil && v })
				if got := time.Since(start); got != tc.wantAt || tally.Won != tc.wantWon {
					t.Errorf("won=%v after %v, want won=%v after %v", tally.Won, got, tc.wantWon, tc.wantAt)
				}
				for i, want := range tc.errs {
					if got := tally.Votes[i].Err; want == nil && got != nil || want != nil && !errors.Is(got, want) || errors.Is(got, ErrAllLate) {
						t.Errorf("node %d: %v, want %v (and not every node late)", i, got, want)
					}
				}
				close(release)
				round.Wait()
			})
		})
	}
}
