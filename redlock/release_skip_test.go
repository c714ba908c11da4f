package redlock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// The release skip (refusedIn) under reruns: a failed attempt (contended
// on 3 of 5 nodes, every node's script cache flushed, so fenced phase 1
// meets NOSCRIPT and runs again as EVAL) leaves none of its values behind,
// on either transport.
func TestFailedAttemptsLeaveNothingAfterScriptFlush(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		for _, direct := range []bool{false, true} {
			for range 20 {
				c := newCluster(t, 5)
				c.setOther(t, "k", 0, 1, 2)
				for _, cl := range c.clients {
					_ = cl.ScriptFlush(t.Context()).Err()
				}
				l := newLocker(t, c.nodes(nil), &redlock.Options{Fencing: fenced, NoAutoPipeline: direct})
				_, err := l.TryLock(t.Context(), "k", time.Minute)
				require.ErrorIs(t, err, redlock.ErrNotObtained)
				drain(t, l)
				for i, m := range c.servers {
					v, err := m.Get("k")
					if i <= 2 {
						require.Equal(t, "someone-else", v)
					} else if err == nil && !strings.HasPrefix(v, "someone") {
						t.Fatalf("fenced=%v direct=%v: node %d left holding %q", fenced, direct, i, v)
					}
				}
			}
		}
	}
}

// The release skip under contention within the process and between
// Lockers: once every
// winner has unlocked and everything is drained, no node holds the key.
func TestContendedAttemptsLeaveNothingBehind(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		for _, direct := range []bool{false, true} {
			c := newCluster(t, 5)
			ls := []*redlock.Locker{
				newLocker(t, c.nodes(nil), &redlock.Options{Fencing: fenced, NoAutoPipeline: direct}),
				newLocker(t, c.nodes(nil), &redlock.Options{Fencing: fenced, NoAutoPipeline: direct}),
			}
			done := make(chan struct{})
			for g := range 8 {
				go func() {
					defer func() { done <- struct{}{} }()
					l := ls[g%2]
					for range 25 {
						lease, err := l.TryLock(t.Context(), "k", time.Minute)
						if err == nil {
							_ = lease.Unlock(t.Context())
						}
					}
				}()
			}
			for range 8 {
				<-done
			}
			for _, l := range ls {
				drain(t, l)
			}
			for i, m := range c.servers {
				if v, err := m.Get("k"); err == nil {
					t.Errorf("fenced=%v direct=%v: node %d left holding %q", fenced, direct, i, v)
				}
			}
		}
	}
}
