package wire

import (
	"context"
	"testing"
	"time"
)

// The WAIT timeout is half the NodeTimeout, at least 1 ms; a second WAIT on
// the same call (after NOSCRIPT) gets at most half of what is left, so both
// together still end within the NodeTimeout.
func TestWaitTimeouts(t *testing.T) {
	for _, tc := range []struct {
		nodeTimeout time.Duration
		want        int64
	}{{50 * time.Millisecond, 25}, {time.Second, 500}, {time.Millisecond, 1}, {1500 * time.Microsecond, 1}} {
		w := NewWait(2, false, tc.nodeTimeout)
		if got := w.args[len(w.args)-1]; got != tc.want || w.args[0] != "wait" || w.args[1] != 2 {
			t.Errorf("NodeTimeout %v: %v; want WAIT 2 %d", tc.nodeTimeout, w.args, tc.want)
		}
	}
	w := NewWait(1, false, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if got := w.within(ctx)[2].(int64); got > 150 || got < 1 {
		t.Errorf("a second WAIT with 300ms left: timeout %dms; want at most 150", got)
	}
	if got := w.within(context.Background())[2]; got != int64(500) {
		t.Errorf("without a deadline: %v; want the usual 500", got)
	}
	if NewWait(0, false, time.Second) != nil {
		t.Error("a WAIT with neither WaitReplicas nor WaitAOF")
	}
}
