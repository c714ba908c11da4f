package redlock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// A fenced lease's token record, sent unawaited after a fast-path
// acquisition, is still part of what the lease writes on the node: a
// release is the last word of its lease on a node (see fanOut), and the
// direct transport (every Node that is not a *redis.Client, or
// Options.NoAutoPipeline) keeps it so for the lease's SET, phase 2 and
// extensions. Here lease A's record to node 0 is slow (its connection
// stalls); A is unlocked meanwhile, B takes the key with node 0's counter
// and records its token there, and then A's record arrives. B holds the
// key for its whole TTL, and Inspect must show B's token (Lease.Token), not
// 0: the stale record of a lease that ended must not erase the holder's.
func TestInspectShowsTheHoldersTokenAfterAnEarlierLeasesLateRecord(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	var (
		mu    sync.Mutex
		gated = true
	)
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	// Nodes 1 and 2 answer acquisitions a little later than node 0, so that
	// node 0 counts in every decision and its counter issues every token.
	wrap := func(gate bool) func(int, redlock.Node) redlock.Node {
		return func(i int, n redlock.Node) redlock.Node {
			h := &hookNode{Node: n}
			if i > 0 {
				h.beforeScript = func(_ context.Context, keys []string, _ []any) error {
					if len(keys) > 1 && strings.HasSuffix(keys[1], ":fencing") {
						time.Sleep(20 * time.Millisecond)
					}
					return nil
				}
			}
			if gate {
				h.beforeDo = func(_ context.Context, args []any) error {
					k, _ := args[1].(string)
					mu.Lock()
					hold := gated && strings.HasSuffix(k, ":fencing-token")
					mu.Unlock()
					if hold {
						once.Do(func() { close(arrived) })
						<-release
					}
					return nil
				}
			}
			return h
		}
	}
	la := newLocker(t, c.nodes(wrap(true)), &redlock.Options{Fencing: true})
	lb := newLocker(t, c.nodes(wrap(false)), &redlock.Options{Fencing: true})

	a, err := la.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	<-arrived // A's record is on its way to node 0, and slow
	mu.Lock()
	gated = false
	mu.Unlock()
	require.NoError(t, a.Unlock(ctx))

	b, err := lb.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	drain(t, lb) // B's record is on node 0
	in, err := lb.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, b.Token(), in.Token, "control: before A's record arrives")

	close(release) // A's record arrives
	drain(t, la)
	in, err = lb.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, b.Value(), in.Holder, "B holds the key")
	assert.Positive(t, b.Validity())
	assert.Equal(t, b.Token(), in.Token, "Inspect shows the holder's token")
}
