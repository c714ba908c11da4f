package integration

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
)

// The operator's view on real servers: Inspect names the holder of a lease
// under Do, its owner, the time left by the servers' own clocks and the
// fencing counters and the holder's token, and a frozen node by its error; Revoke deletes the key
// everywhere, the holder's next extension finds the tombstone, Do cancels
// its work with ErrLost, and the next holder's token is higher. The
// negative control deletes the keys with DEL on every node, as an operator
// without Revoke would: the holder's healing extension sets them again, and
// its work goes on, unaware.
func TestInspectAndRevokeADo(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	const ttl = 1500 * time.Millisecond
	for _, revoke := range []bool{true, false} {
		name := map[bool]string{true: "Revoke", false: "DEL on every node (negative control)"}[revoke]
		t.Run(name, func(t *testing.T) {
			key := "it:ops:" + map[bool]string{true: "revoke", false: "del"}[revoke]
			holderEvents := &eventLog{}
			holder := newLocker(t, c, &redlock.Options{Owner: "app-1", Fencing: true, NodeTimeout: time.Second, Observer: holderEvents})
			ops := newLocker(t, c, &redlock.Options{Owner: "oncall", Fencing: true, NodeTimeout: 300 * time.Millisecond})
			var token uint64
			worked := false
			// The operator's calls take the test's context, not the work's:
			// the work's ends as soon as the holder learns of the
			// revocation, perhaps before Revoke heard from every node.
			err := holder.Do(ctx, key, ttl, func(work context.Context, lease *redlock.Lease) error {
				token = lease.Token()
				drain(t, holder)
				in, err := ops.Inspect(ctx, key)
				require.NoError(t, err)
				assert.Equal(t, lease.Value(), in.Holder)
				assert.Equal(t, "app-1", in.Owner)
				assert.Positive(t, in.HeldFor)
				assert.LessOrEqual(t, in.HeldFor, ttl)
				assert.Equal(t, token, in.Token, "Inspect shows the token the holder's Lease.Token reports")
				for _, n := range in.Nodes {
					assert.NoError(t, n.Err, n.Name)
					assert.True(t, n.Held, n.Name)
					assert.Positive(t, n.Counter, n.Name)
					if n.Token != 0 { // the node that issued the token records it
						assert.Equal(t, token, n.Token, n.Name)
					}
				}

				// One node frozen: it is named; the others are read.
				require.NoError(t, c.Nodes[4].Freeze(ctx))
				in, err = ops.Inspect(ctx, key)
				require.NoError(t, c.Nodes[4].Thaw(context.Background()))
				require.NoError(t, err)
				assert.ErrorContains(t, in.Nodes[4].Err, "no reply")
				assert.Equal(t, lease.Value(), in.Holder, "four of five still say so")

				if revoke {
					rev, err := ops.Revoke(ctx, key)
					require.NoError(t, err)
					for _, n := range rev.Nodes {
						assert.True(t, n.Deleted, n.Name)
						assert.Equal(t, "app-1", n.Owner, n.Name)
					}
				} else {
					for _, n := range c.Nodes {
						require.NoError(t, n.Admin.Del(ctx, key).Err())
					}
				}
				select {
				case <-work.Done():
					return work.Err()
				case <-time.After(3 * ttl): // several extensions
					worked = true
					return nil
				}
			})
			if !revoke {
				require.NoError(t, err, "the negative control: healed back, the holder never knew")
				assert.True(t, worked)
				return
			}
			require.ErrorIs(t, err, redlock.ErrLost)
			assert.False(t, worked, "Do cancelled the work")
			drain(t, holder)
			assert.Len(t, holderEvents.of(redlock.OpLost), 1)

			in, err := ops.Inspect(ctx, key)
			require.NoError(t, err)
			assert.Empty(t, in.Holder)
			for _, n := range in.Nodes {
				assert.False(t, n.Held, "%s: not healed back", n.Name)
				assert.NotEmpty(t, n.Revoked, "%s: the tombstone", n.Name)
			}
			next, err := ops.TryLock(ctx, key, time.Second)
			require.NoError(t, err)
			assert.Greater(t, next.Token(), token, "the next holder's token fences the revoked one off")
			require.NoError(t, next.Unlock(ctx))
		})
	}
}

// eventLog is an Observer that keeps every event.
type eventLog struct {
	mu     sync.Mutex
	events []redlock.Event
}

func (l *eventLog) Observe(e redlock.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// of returns the events of op, in the order observed.
func (l *eventLog) of(op redlock.Op) []redlock.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []redlock.Event
	for _, e := range l.events {
		if e.Op == op {
			out = append(out, e)
		}
	}
	return out
}

// Inspect and Revoke report a key's time left as the nodes' PTTL says it,
// however long: a key set to expire in three or six centuries (longer than
// a time.Duration holds) reads as the longest Duration, never as a key
// without expiry (negative) nor as a short time left (the product wrapped).
// Control: a key of an hour reads as an hour.
func TestInspectReportsTheTimeLeftOfAKeyLongerThanADuration(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	ops := newLockerOn(t, c.Lockers(), &redlock.Options{NodeTimeout: time.Second})
	for i, tt := range []struct {
		name  string
		ms    int64
		least time.Duration
	}{
		{"control: an hour", time.Hour.Milliseconds(), time.Hour - time.Minute},
		{"three centuries", 300 * 365 * 24 * time.Hour.Milliseconds(), math.MaxInt64},
		{"six centuries", 600 * 365 * 24 * time.Hour.Milliseconds(), math.MaxInt64},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("it:long-lived:%d", i)
			for _, n := range c.Nodes {
				require.NoError(t, n.Admin.Do(ctx, "set", key, "someone", "px", tt.ms).Err())
			}
			in, err := ops.Inspect(ctx, key)
			require.NoError(t, err)
			require.Equal(t, "someone", in.Holder)
			assert.GreaterOrEqual(t, in.HeldFor, tt.least, "HeldFor")
			for _, n := range in.Nodes {
				assert.GreaterOrEqual(t, n.TTL, tt.least, "%s: TTL", n.Name)
			}
			rev, err := ops.Revoke(ctx, key)
			require.NoError(t, err)
			for _, n := range rev.Nodes {
				assert.GreaterOrEqual(t, n.TTL, tt.least, "%s: the revoked key's TTL", n.Name)
			}
		})
	}
}
