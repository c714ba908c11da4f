package redlock_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// A fenced lease's token record, sent unawaited after a fast-path
// acquisition, may arrive after its lease ended: here lease A's record to
// node 0 is slow (its call stalls); A is unlocked meanwhile, B takes the
// key with node 0's counter and records its token there, and then A's
// record arrives. The record is written only while the key holds its
// lease's value (record.lua), so B's stays: Inspect shows B's token for
// B's whole TTL, not 0.
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
			h.beforeScript = func(_ context.Context, keys []string, _ []any) error {
				if i > 0 && len(keys) > 1 && strings.HasSuffix(keys[1], ":fencing") {
					time.Sleep(20 * time.Millisecond)
				}
				if !gate || !slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, ":fencing-token") }) {
					return nil
				}
				mu.Lock()
				hold := gated
				mu.Unlock()
				if hold {
					once.Do(func() { close(arrived) })
					<-release
				}
				return nil
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
