package guard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// The guard's state machine without a server: the companions' replies are
// set by hand, the examination is answered by scriptedNode, and the
// quarantine's end is read on a fake clock. Each case is one transition:
// first use, an intact memory, a lost one, a new process, a clock jump.

// scriptedNode answers the examine script as examine.lua would on a node
// whose memory began at began, by the node's clock (the real clock plus
// offset), and counts the examinations.
type scriptedNode struct {
	began    time.Time
	offset   time.Duration
	examined int
	marker   string        // the marker's value, as the last examination left it
	declared time.Duration // the MaxTTL the marker declares
	// declaredField, if set, is the marker's MaxTTL field as written,
	// instead of declared: a value no Locker of this version writes.
	declaredField string
}

func (n *scriptedNode) nodeNow() time.Time { return time.Now().Add(n.offset) }

// examine answers an examination; a new copy (sent, as EVAL, its own
// source) names its digest, a stand-in distinct for each.
func (n *scriptedNode) examine(ctx context.Context, newCopy bool) *redis.Cmd {
	n.examined++
	digest := any(nil)
	if newCopy {
		digest = fmt.Sprintf("%040x", n.examined)
	}
	found := any(nil) // examine.lua found no marker
	if n.marker != "" {
		found = n.marker
	}
	field := fmt.Sprint(n.declared.Milliseconds())
	if n.declaredField != "" {
		field = n.declaredField
	}
	n.marker = fmt.Sprintf("%d run1 %s", n.began.UnixMilli(), field)
	at := n.nodeNow()
	cmd := redis.NewCmd(ctx)
	// {marker, seconds, microseconds, expiry (-3: not read), pttl,
	// seconds, microseconds, found, evicts, digest}
	cmd.SetVal([]any{n.marker, at.Unix(), int64(at.Nanosecond() / 1000), int64(-3), int64(-1), at.Unix(), int64(at.Nanosecond() / 1000), found, int64(0), digest})
	return cmd
}

func (n *scriptedNode) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return n.examine(ctx, true)
}

func (n *scriptedNode) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return n.examine(ctx, false)
}

func (n *scriptedNode) EvalRO(ctx context.Context, s string, k []string, a ...any) *redis.Cmd {
	return n.Eval(ctx, s, k, a...)
}

func (n *scriptedNode) EvalShaRO(ctx context.Context, s string, k []string, a ...any) *redis.Cmd {
	return n.EvalSha(ctx, s, k, a...)
}

func (n *scriptedNode) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	cmd := redis.NewBoolSliceCmd(ctx)
	cmd.SetErr(errors.New("not used"))
	return cmd
}

func (n *scriptedNode) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx)
	cmd.SetErr(errors.New("not used"))
	return cmd
}

// answer sets the replies a node gives the companions c: the marker's
// value ("" for missing), whether the examine copy is cached (the same
// process), and its clock.
func answer(c *Companions, marker string, cached bool, nodeNow time.Time) {
	if marker == "" {
		c.get.SetErr(redis.Nil)
	} else {
		c.get.SetVal(marker)
	}
	c.exists.SetVal([]bool{cached})
	if c.time != nil {
		c.time.SetVal(nodeNow)
	}
}

func TestJudgeWithoutAServer(t *testing.T) {
	const maxTTL = 10 * time.Second
	ctx := t.Context()
	start := time.Now()
	fake := clock.NewFake(start)
	g := New(Config{MaxTTL: maxTTL, Bound: drift.Default, Clock: fake})
	node := &scriptedNode{began: start.Add(-time.Hour), declared: maxTTL} // whole for an hour
	judge := func(marker string, cached bool) error {
		t.Helper()
		c := g.Board(ctx, "k")
		var cmds []redis.Cmder
		require.Len(t, g.AppendTo(c, cmds), 3, "GET of the marker, SCRIPT EXISTS, TIME")
		sent := time.Now()
		answer(&c, marker, cached, node.nodeNow())
		return g.Judge(ctx, node, c, wire.Trip{Sent: sent, Received: time.Now()})
	}

	// First use: never examined, so examined now; the memory is old.
	require.NoError(t, judge("", false))
	assert.Equal(t, 1, node.examined)

	// An intact memory on the same process: no examination, the vote counts.
	require.NoError(t, judge(node.marker, true))
	assert.Equal(t, 1, node.examined, "intact companions need no examination")

	// The same marker on another process (its script cache lacks the copy
	// that examined it: a restart that loaded a snapshot): examined again.
	require.NoError(t, judge(node.marker, false))
	assert.Equal(t, 2, node.examined)

	// The memory is lost (the marker missing), and began now: quarantined
	// for MaxTTL, plus the drift bound, by the guard's clock.
	node.began, node.marker = node.nodeNow(), ""
	err := judge("", true)
	var q *QuarantineError
	require.ErrorAs(t, err, &q)
	assert.ErrorIs(t, err, ErrNodeQuarantined)
	assert.Equal(t, memoryCause, q.Cause)
	assert.InDelta(t, float64(maxTTL+drift.Default.Of(maxTTL)), float64(q.Left), float64(time.Second))
	assert.Error(t, judge(node.marker, true), "still quarantined")
	fake.Advance(maxTTL + drift.Default.Of(maxTTL) + time.Second)
	assert.NoError(t, judge(node.marker, true), "the quarantine ended on the guard's clock")
	assert.NoError(t, g.Current(fake.Now()))

	// The node's clock jumps forward: quarantined for MaxTTL again, with
	// the jump named.
	node.offset = time.Minute
	err = judge(node.marker, true)
	require.ErrorAs(t, err, &q)
	assert.Contains(t, q.Cause, "clock jumped forward")
	require.Error(t, g.Current(fake.Now()))
	fake.Advance(maxTTL + drift.Default.Of(maxTTL) + time.Second)
	assert.NoError(t, g.Current(fake.Now()))

	// Another Locker declared a longer MaxTTL in the marker: a lost memory
	// is quarantined for that longer one (it may hold such leases).
	node.declared = 3 * maxTTL
	require.NoError(t, judge("", true), "examined: the old memory, and the longer MaxTTL learned")
	node.began, node.marker = node.nodeNow(), ""
	require.ErrorAs(t, judge("", true), &q)
	assert.InDelta(t, float64(3*maxTTL+drift.Default.Of(3*maxTTL)), float64(q.Left), float64(time.Second))
}

// A node quarantined for both causes at once (a new memory, and a clock
// that jumped) is reported with both, each with its time left: a trust
// lifts only the memory's (Forgot), and JumpLeft says how long the jump's
// lasts after it. Reporting the longer cause alone would hide the other:
// the memory behind a jump (no trust offered where one would help), or
// the jump behind a memory (a trust offered that leaves the node out).
func TestAQuarantineForBothCausesNamesBoth(t *testing.T) {
	const maxTTL = 10 * time.Second
	ctx := t.Context()
	start := time.Now()
	fake := clock.NewFake(start)
	g := New(Config{MaxTTL: maxTTL, Bound: drift.Default, Clock: fake})
	node := &scriptedNode{began: start.Add(-time.Hour), declared: maxTTL}
	judge := func(marker string) error {
		t.Helper()
		c := g.Board(ctx, "k")
		g.AppendTo(c, nil)
		sent := time.Now()
		answer(&c, marker, true, node.nodeNow())
		return g.Judge(ctx, node, c, wire.Trip{Sent: sent, Received: time.Now()})
	}
	require.NoError(t, judge(""), "an old memory, examined")

	node.began, node.marker = node.nodeNow(), "" // the memory lost
	var q *QuarantineError
	require.ErrorAs(t, judge(""), &q)
	require.True(t, q.Forgot)
	require.Zero(t, q.JumpLeft)

	fake.Advance(maxTTL / 2)
	node.offset = time.Minute // and then its clock jumps: the jump's quarantine outlasts the memory's
	require.ErrorAs(t, judge(node.marker), &q)
	assert.True(t, q.Forgot, "the memory is still new: a trust would lift that part")
	assert.Greater(t, q.JumpLeft, maxTTL/2, "the jump's quarantine, which a trust does not lift")
	assert.Equal(t, q.JumpLeft, q.Left, "out for the longer of the two")
	assert.Contains(t, q.Cause, "its memory began less than MaxTTL ago")
	assert.Contains(t, q.Cause, "its clock jumped forward by")

	fake.Advance(maxTTL + drift.Default.Of(maxTTL) + time.Second) // both over
	assert.NoError(t, g.Current(fake.Now()))
}
