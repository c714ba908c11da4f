package redlock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

func batchedNodes(t *testing.T, clients []*redis.Client) []redlock.Node {
	t.Helper()
	var nodes []redlock.Node
	for _, c := range clients {
		b := redlock.Batched(c)
		t.Cleanup(func() { b.Close() })
		nodes = append(nodes, b)
	}
	return nodes
}

// The coordinator's behaviours hold over batched nodes: locking, contention,
// extension after a script flush (EVALSHA, then EVAL on NOSCRIPT), unlock.
func TestBatchedNodes(t *testing.T) {
	c := newCluster(t, 5)
	l := newLocker(t, batchedNodes(t, c.clients), &redlock.Options{Fencing: true})
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	_, err = l.TryLock(t.Context(), "k", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	for _, cl := range c.clients {
		require.NoError(t, cl.ScriptFlush(t.Context()).Err())
	}
	require.NoError(t, lease.Extend(t.Context(), time.Minute))
	require.NoError(t, lease.Check(t.Context()))
	require.NoError(t, lease.Unlock(t.Context()))
	drain(t, l)
	assert.Empty(t, c.holding("k", lease.Value()))
	_, err = redlock.New([]redlock.Node{batchedNodes(t, c.clients)[0], batchedNodes(t, c.clients)[0]}, nil)
	assert.ErrorContains(t, err, "same server", "two batched wrappers of one client are one node")
}

// Concurrent callers' commands run in the order they were queued, and all
// complete.
func TestBatchedNodeOrderAndConcurrency(t *testing.T) {
	c := newCluster(t, 1)
	b := redlock.Batched(c.clients[0])
	defer b.Close()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				key := "list"
				if err := b.Do(t.Context(), "RPUSH", key, g*1000+i).Err(); err != nil {
					t.Errorf("RPUSH: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	vals, err := c.clients[0].LRange(t.Context(), "list", 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, vals, 16*200)
	next := map[int]int{} // each goroutine's pushes must keep their order
	for _, v := range vals {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		g, i := n/1000, n%1000
		require.Equal(t, next[g], i, "goroutine %d: push %d out of order", g, i)
		next[g]++
	}
}

// A node that stops answering fills its queue; then commands fail at once
// instead of waiting, and a caller's context still bounds its wait.
func TestBatchedNodeHungQueue(t *testing.T) {
	c := newCluster(t, 1)
	proxies, _ := c.proxied(t)
	client := redis.NewClient(&redis.Options{Addr: proxies[0].Addr(), ReadTimeout: 2 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	b := redlock.Batched(client)
	defer b.Close()
	proxies[0].SetBlackhole(true)

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.Do(ctx, "PING").Err()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), time.Second)

	full := 0
	for range 3000 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		if err := b.Do(ctx, "PING").Err(); errors.Is(err, redlock.ErrNodeQueueFull) {
			full++
		}
		cancel()
	}
	assert.Positive(t, full, "a stuck node's queue must fill and fail fast")
	proxies[0].SetBlackhole(false)
	proxies[0].DropConnections()
}
