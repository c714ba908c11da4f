package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
)

// pausingScripter is an evictsScripter whose next examination, once pause
// is armed, holds its reply (already read from the node) until released.
type pausingScripter struct {
	evictsScripter
	armed    atomic.Bool
	reached  chan struct{}
	released chan struct{}
}

func (p *pausingScripter) hold(cmd *redis.Cmd) *redis.Cmd {
	cmd = p.fix(cmd)
	if p.armed.CompareAndSwap(true, false) {
		close(p.reached)
		<-p.released
	}
	return cmd
}

func (p *pausingScripter) Eval(ctx context.Context, s string, keys []string, args ...any) *redis.Cmd {
	return p.hold(p.Client.Eval(ctx, s, keys, args...))
}

func (p *pausingScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return p.hold(p.Client.EvalSha(ctx, sha, keys, args...))
}

// Two examinations of the same process overlap (a batch's, and the one
// TrustNodes or another batch runs): the one that ran on the node first,
// before the operator set an eviction policy, stores its state last. The
// guard keeps the older state (evicts=false) over the newer one that saw
// the policy; its marker, expiry and proof are the same, so no companion
// ever tells, and every later batch goes without the eviction companion
// while the node may evict: a lock key evicted under volatile-ttl (the
// marker spared) is granted again and the vote counts.
func TestOlderExaminationOverwritesNewerNeeds(t *testing.T) {
	m := redistest.Miniredis(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	g := testGuard(time.Second)
	node := &pausingScripter{evictsScripter: evictsScripter{Client: c}, reached: make(chan struct{}), released: make(chan struct{})}
	ctx := t.Context()
	require.NoError(t, m.Set(markerKey, "0 ?")) // trusted: no quarantine

	_, _, err := g.examine(ctx, node, markerKey)
	require.NoError(t, err)

	// Examination A runs on the node (no eviction policy yet) and is slow
	// to record what it found.
	node.armed.Store(true)
	var wg sync.WaitGroup
	var sa memoryState
	wg.Go(func() { sa, _, _ = g.examine(ctx, node, markerKey) })
	<-node.reached

	// The operator sets volatile-ttl; examination B sees it and records it.
	node.evicts.Store(true)
	sb, _, err := g.examine(ctx, node, markerKey)
	require.NoError(t, err)
	require.True(t, sb.evicts)

	// A records its older finding last.
	close(node.released)
	wg.Wait()
	require.False(t, sa.evicts)

	// A batch now: the latest examination on the node said it may evict.
	cs := g.companions(ctx, markerKey)
	before := g.standalone.Load()
	sent, received := sendCompanions(t, c, cs)
	verdict := g.judge(ctx, node, cs, sent, received, false)
	if cs.evictions == nil && verdict == nil && before == g.standalone.Load() {
		t.Fatalf("the latest examination said the node may evict, but an older one overlapping it was recorded last (evicts=%v): the batch carried no eviction companion and its votes counted without an examination", g.standalone.Load().evicts)
	}
}
