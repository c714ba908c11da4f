package guard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/stretchr/testify/require"
)

// evictsScripter is a node whose examinations say it may evict keys (as a
// node with maxmemory and volatile-ttl would say; miniredis has no INFO
// memory) once evicts is set.
type evictsScripter struct {
	*redis.Client
	evicts atomic.Bool
}

func (e *evictsScripter) fix(cmd *redis.Cmd) *redis.Cmd {
	if res, err := cmd.Slice(); err == nil && len(res) == 10 && e.evicts.Load() {
		res[8] = int64(1)
		cmd.SetVal(res)
	}
	return cmd
}

func (e *evictsScripter) Eval(ctx context.Context, s string, keys []string, args ...any) *redis.Cmd {
	return e.fix(e.Client.Eval(ctx, s, keys, args...))
}

func (e *evictsScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return e.fix(e.Client.EvalSha(ctx, sha, keys, args...))
}

// testGuard is a standalone node's guard with the defaults a Locker with
// this MaxTTL gives it.
func testGuard(maxTTL time.Duration) *Guard {
	return New(Config{MaxTTL: maxTTL, Bound: drift.Default, Clock: clock.System{}})
}

// sendCompanions sends c's companions (but the eviction companion, which
// miniredis cannot answer) in one pipeline, as a batch would.
func sendCompanions(t *testing.T, c *redis.Client, cs Companions) (time.Time, time.Time) {
	sent := time.Now()
	_, err := c.Pipelined(t.Context(), func(p redis.Pipeliner) error {
		for _, cmd := range cs.appendTo(nil) {
			if cmd == cs.evictions {
				continue
			}
			_ = p.Process(t.Context(), cmd)
		}
		return nil
	})
	require.NoError(t, err)
	return sent, time.Now()
}

// A batch whose companions were built before an examination that changed
// which companions the node needs (here: the node may evict now) is judged
// by the new state, whose proof is the same adopted copy of the examine
// script (EVALSHA of the same copy on the same process): the judge takes
// the batch without the eviction companion the new state requires, and
// without examining again.
func TestStaleCompanionsJudgedByANewerState(t *testing.T) {
	m := redistest.Miniredis(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	g := testGuard(time.Second)
	node := &evictsScripter{Client: c}
	ctx := t.Context()
	require.NoError(t, m.Set(markerKey, "0 ?")) // trusted: no quarantine

	s1, _, err := g.examine(ctx, node, markerKey)
	require.NoError(t, err)
	require.False(t, s1.evicts)
	stale := g.companions(ctx, markerKey) // a batch leaves now
	require.Nil(t, stale.evictions)

	// Meanwhile the operator set volatile-ttl, and an examination (a
	// TrustNodes, another batch's) saw it.
	node.evicts.Store(true)
	s2, _, err := g.examine(ctx, node, markerKey)
	require.NoError(t, err)
	require.True(t, s2.evicts)
	require.Same(t, s1.proof, s2.proof, "the same adopted copy proves both examinations")

	// Control: a batch built now carries INFO stats, and a count above the
	// marker's (an eviction that spared the marker) sends the guard to
	// examine again.
	fresh := g.companions(ctx, markerKey)
	require.NotNil(t, fresh.evictions, "control: the new state needs the eviction companion")
	before := g.standalone.Load()
	sent, received := sendCompanions(t, c, fresh)
	fresh.evictions.SetVal("# Stats\r\nevicted_keys:3\r\n")
	_ = g.judge(ctx, node, fresh, sent, received, false)
	require.NotSame(t, before, g.standalone.Load(), "control: the moved count was examined")

	// The stale batch: its lock keys may have been evicted just the same,
	// but it carries no INFO stats; judge reads the new state, whose proof
	// is the batch's, and counts the votes without looking.
	before = g.standalone.Load()
	sent, received = sendCompanions(t, c, stale)
	verdict := g.judge(ctx, node, stale, sent, received, false)
	if verdict == nil && before == g.standalone.Load() {
		t.Fatalf("a batch without the eviction companion was judged by a state that needs it (evicts=%v), and its votes counted without an examination", before.evicts)
	}
}
