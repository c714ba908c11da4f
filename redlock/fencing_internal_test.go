package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
)

func miniNodes(t *testing.T, n int) ([]*miniredis.Miniredis, []Node) {
	t.Helper()
	var servers []*miniredis.Miniredis
	var nodes []Node
	for range n {
		m := redistest.Miniredis(t)
		_ = m.Set("redlock:memory", "0 ?") // trusted: see trust in helpers_test.go
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		servers = append(servers, m)
		nodes = append(nodes, c)
	}
	return servers, nodes
}

// The counterexample to taking the maximum alone, and phase 2 fixing it.
// Three nodes; node 0's counter was left at 5 by earlier attempts that won
// only there. A wins nodes 0 and 1, B (after A returned) wins nodes 1 and 2.
func TestMaxAloneIsNotMonotonicPhaseTwoIs(t *testing.T) {
	ctx := t.Context()
	const key, counter = "k", "{k}:fencing"
	setUp := func(t *testing.T) ([]*miniredis.Miniredis, []node) {
		servers, nodes := miniNodes(t, 3)
		require.NoError(t, servers[0].Set(counter, "5"))
		ns, err := newNodes(nodes, &Options{NoAutoPipeline: true}, nil)
		require.NoError(t, err)
		return servers, ns
	}
	block := func(m *miniredis.Miniredis) func() { // another holder has the key on m
		require.NoError(t, m.Set(key, "someone-else"))
		return func() { m.Del(key) }
	}

	t.Run("max alone", func(t *testing.T) {
		servers, ns := setUp(t)
		phase1 := func(value string, on ...int) uint64 {
			var tMax uint64
			for _, i := range on {
				l := &Locker{nodes: ns}
				c1, read, counters := l.acquisition(request{key: key, counter: counter, ms: 60000}, value)
				o, err := read(&ballot{nodes: ns, counters: counters}, i, ns[i].link.Names().Run(ctx, ns[i].Node, c1.Script.Script, c1.Keys, c1.Argv...))
				require.NoError(t, err)
				require.Equal(t, Granted, o)
				tMax = max(tMax, counters[i])
			}
			for _, i := range on {
				servers[i].Del(key) // unlock
			}
			return tMax
		}
		tA := phase1("A", 0, 1)
		tB := phase1("B", 1, 2) // begins after A returned
		assert.Less(t, tB, tA, "the counterexample: B's maximum (%d) is below A's (%d)", tB, tA)
	})

	t.Run("two phases", func(t *testing.T) {
		servers, ns := setUp(t)
		l, err := New([]Node{ns[0].Node, ns[1].Node, ns[2].Node}, &Options{Fencing: true, NodeTimeout: time.Second})
		require.NoError(t, err)
		unblock := block(servers[2])
		a, err := l.TryLock(ctx, key, time.Minute)
		require.NoError(t, err)
		require.NoError(t, a.Unlock(ctx))
		require.NoError(t, l.Drain(ctx))
		unblock()
		defer block(servers[0])()
		b, err := l.TryLock(ctx, key, time.Minute)
		require.NoError(t, err)
		t.Logf("tokens: A %d (t=%d, node %d), B %d (t=%d, node %d)", a.Token(), a.Token()>>8, a.Token()&0xff, b.Token(), b.Token()>>8, b.Token()&0xff)
		assert.Greater(t, b.Token(), a.Token())
		assert.Equal(t, uint64(6), a.Token()>>tokenNodeBits)
		assert.Equal(t, uint64(7), b.Token()>>tokenNodeBits)
		require.NoError(t, b.Unlock(ctx))
		require.NoError(t, l.Drain(context.Background()))
	})
}
