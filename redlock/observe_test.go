package redlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []redlock.Event
}

func (r *recorder) Observe(e redlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// of returns the events of op, in the order observed.
func (r *recorder) of(op redlock.Op) []redlock.Event {
	return matching(&r.mu, &r.events, func(e redlock.Event) bool { return e.Op == op })
}

// matching returns those of *items that keep keeps, in order, read under
// mu.
func matching[T any](mu *sync.Mutex, items *[]T, keep func(T) bool) []T {
	mu.Lock()
	defer mu.Unlock()
	var out []T
	for _, x := range *items {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// one returns the only event of op, failing the test if there is not
// exactly one.
func (r *recorder) one(t *testing.T, op redlock.Op) redlock.Event {
	t.Helper()
	events := r.of(op)
	require.Len(t, events, 1, "%v events", op)
	return events[0]
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = nil
}

// sameNodes checks an event's Nodes against the caller's *QuorumError:
// every node's outcome and error as the caller saw them, with latencies
// where the node replied.
func sameNodes(t *testing.T, got []redlock.NodeResult, err error) {
	t.Helper()
	var q *redlock.QuorumError
	require.ErrorAs(t, err, &q)
	require.Len(t, got, len(q.Nodes))
	for i, n := range got {
		want := q.Nodes[i]
		assert.Equal(t, want.Node, n.Node)
		assert.Equal(t, want.Name, n.Name)
		assert.Equal(t, want.Outcome, n.Outcome, "node %d", i)
		assert.Equal(t, want.Err, n.Err, "node %d", i)
	}
}

// granted counts the nodes that granted, and checks that each has a latency.
func grantedNodes(t *testing.T, nodes []redlock.NodeResult) int {
	t.Helper()
	n := 0
	for _, r := range nodes {
		if r.Outcome == redlock.Granted {
			n++
			assert.Positive(t, r.Latency, "node %d granted: its reply was timed", r.Node)
		}
	}
	return n
}

func TestObserverSeesEveryOperation(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	rec := &recorder{}
	l := newLocker(t, c.nodes(nil), &redlock.Options{Observer: rec, Fencing: true})

	lease, err := l.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	e := rec.one(t, redlock.OpAcquire)
	assert.Equal(t, "k", e.Key)
	assert.Equal(t, 1, e.Attempt)
	assert.NoError(t, e.Err)
	assert.Equal(t, lease.Token(), e.Token)
	assert.NotZero(t, e.Token)
	assert.Positive(t, e.Duration)
	assert.InDelta(t, lease.Validity(), e.Validity, float64(time.Second))
	require.Len(t, e.Nodes, 3)
	assert.GreaterOrEqual(t, grantedNodes(t, e.Nodes), 2)

	require.NoError(t, lease.Extend(ctx, 10*time.Second))
	e = rec.one(t, redlock.OpExtend)
	assert.NoError(t, e.Err)
	assert.Equal(t, lease.Token(), e.Token)
	assert.Positive(t, e.Validity)
	assert.GreaterOrEqual(t, grantedNodes(t, e.Nodes), 2)

	require.NoError(t, lease.Check(ctx))
	e = rec.one(t, redlock.OpCheck)
	assert.NoError(t, e.Err)
	assert.GreaterOrEqual(t, grantedNodes(t, e.Nodes), 2)

	require.NoError(t, lease.Unlock(ctx))
	e = rec.one(t, redlock.OpUnlock)
	assert.NoError(t, e.Err)
	assert.Equal(t, lease.Token(), e.Token)
	assert.GreaterOrEqual(t, grantedNodes(t, e.Nodes), 2)

	// A check and an unlock of a lease the nodes no longer hold: the very
	// errors the caller got.
	rec.reset()
	lease, err = l.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	drain(t, l)
	c.setOther(t, "k", 0, 1, 2)
	checkErr := lease.Check(ctx)
	require.ErrorIs(t, checkErr, redlock.ErrNotHeld)
	e = rec.one(t, redlock.OpCheck)
	assert.Equal(t, checkErr, e.Err)
	sameNodes(t, e.Nodes, checkErr)
	taken := 0
	for _, n := range e.Nodes {
		assert.Contains(t, []redlock.Outcome{redlock.Taken, redlock.Unanswered}, n.Outcome)
		if n.Outcome == redlock.Taken {
			taken++
		}
	}
	assert.GreaterOrEqual(t, taken, 2)
	unlockErr := lease.Unlock(ctx)
	require.ErrorIs(t, unlockErr, redlock.ErrNotHeld)
	assert.Equal(t, unlockErr, rec.one(t, redlock.OpUnlock).Err)

	assert.Empty(t, rec.of(redlock.OpRelease), "nothing failed to release")
}

func TestObserverSeesContentionAndTheRelease(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	rec := &recorder{}
	l := newLocker(t, c.nodes(nil), &redlock.Options{Observer: rec})
	c.setOther(t, "k", 1, 2)

	_, err := l.TryLock(ctx, "k", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	e := rec.one(t, redlock.OpAcquire)
	assert.Equal(t, err, e.Err, "the very error the caller got")
	assert.Equal(t, 1, e.Attempt)
	sameNodes(t, e.Nodes, err)

	drain(t, l) // the release's report comes in the background; Drain waits for it
	r := rec.one(t, redlock.OpRelease)
	assert.Equal(t, "k", r.Key)
	assert.Equal(t, 1, r.Attempt)
	assert.NoError(t, r.Err, "node 0's grant was deleted")
	require.Len(t, r.Nodes, 3)
	assert.Equal(t, redlock.Granted, r.Nodes[0].Outcome, "node 0 deleted its grant")
	assert.Equal(t, redlock.Taken, r.Nodes[1].Outcome)
	assert.Empty(t, lockKeys(c.servers[0]))

	// Lock numbers its attempts.
	rec.reset()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = l.Lock(short, "k", 10*time.Second)
	require.Error(t, err)
	attempts := rec.of(redlock.OpAcquire)
	require.GreaterOrEqual(t, len(attempts), 2, "a Lock of 300ms retries")
	for i, a := range attempts {
		assert.Equal(t, i+1, a.Attempt)
		assert.Error(t, a.Err)
	}
}

func TestObserverSeesUnavailableNodes(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	proxies, nodes := c.proxiedWith(t, shortReadTimeout)
	rec := &recorder{}
	l := newLocker(t, nodes, &redlock.Options{Observer: rec, NodeTimeout: 300 * time.Millisecond})
	require.NoError(t, l.Warm(ctx))
	proxies[1].SetBlackhole(true)
	proxies[2].SetBlackhole(true)

	_, err := l.TryLock(ctx, "k", 10*time.Second)
	require.Error(t, err)
	require.NotErrorIs(t, err, redlock.ErrNotObtained)
	e := rec.one(t, redlock.OpAcquire)
	assert.Equal(t, err, e.Err)
	sameNodes(t, e.Nodes, err)
	assert.Equal(t, redlock.Granted, e.Nodes[0].Outcome)
	for _, n := range e.Nodes[1:] {
		assert.Equal(t, redlock.Failed, n.Outcome)
		assert.ErrorContains(t, n.Err, "no reply")
		assert.Zero(t, n.Latency, "no reply: no latency")
	}
	proxies[1].SetBlackhole(false)
	proxies[2].SetBlackhole(false)
}

// A silent node that the majority decided without is not invisible: once
// its calls fail, OpLateFailure names it, for each operation (Of), in the
// background; Drain waits for it. With every node healthy there is none.
func TestObserverSeesLateFailures(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	// The silent node's calls end at their own deadlines: a client without
	// ContextTimeoutEnabled reads a black-holed connection for its
	// ReadTimeout (10 s here) at each of its retries, longer than Drain
	// is given.
	proxies, nodes := c.proxiedWith(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	rec := &recorder{}
	l := newLocker(t, nodes, &redlock.Options{Observer: rec, NodeTimeout: 200 * time.Millisecond})
	require.NoError(t, l.Warm(ctx))
	lease, err := l.TryLock(ctx, "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(ctx))
	drain(t, l)
	require.Empty(t, rec.of(redlock.OpLateFailure), "healthy nodes: none")
	rec.reset()

	proxies[2].SetBlackhole(true)
	defer proxies[2].SetBlackhole(false)
	lease, err = l.TryLock(ctx, "k", time.Second)
	require.NoError(t, err, "two of three decide")
	require.NoError(t, lease.Extend(ctx, time.Second))
	require.NoError(t, lease.Unlock(ctx))
	drain(t, l)
	ofs := map[redlock.Op]bool{}
	for _, e := range rec.of(redlock.OpLateFailure) {
		ofs[e.Of] = true
		require.Len(t, e.Nodes, 1)
		assert.Equal(t, 2, e.Nodes[0].Node)
		assert.Equal(t, redlock.Failed, e.Nodes[0].Outcome)
		assert.Error(t, e.Nodes[0].Err)
		assert.Contains(t, e.Detail, e.Of.String())
	}
	for _, op := range []redlock.Op{redlock.OpAcquire, redlock.OpExtend, redlock.OpUnlock} {
		if !ofs[op] {
			// The decision may have waited for node 2's failure (then it is in
			// the operation's own event, not a late one).
			for _, e := range rec.of(op) {
				if n := e.Nodes[2]; n.Outcome == redlock.Unanswered {
					t.Errorf("%v: node 2 not waited for, and no late failure reported", op)
				}
			}
		}
	}
	assert.True(t, ofs[redlock.OpAcquire] || ofs[redlock.OpExtend] || ofs[redlock.OpUnlock], "some operation decided without the silent node")
}

// A grant that arrives after its attempt was decided is reported, with its
// release, in the background; Drain waits for both.
func TestObserverSeesALateGrant(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	c.setOther(t, "k", 0, 1)
	slow := make(chan struct{})
	rec := &recorder{}
	l := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
		if i != 2 {
			return n
		}
		return &hookNode{Node: n, beforeDo: func(ctx context.Context, args []any) error {
			<-slow // node 2's SET is held back until the attempt is decided
			return nil
		}}
	}), &redlock.Options{Observer: rec})

	_, err := l.TryLock(ctx, "k", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "nodes 0 and 1 decide")
	assert.Empty(t, rec.of(redlock.OpLateGrant), "not yet")
	close(slow)
	drain(t, l)
	late := rec.one(t, redlock.OpLateGrant)
	assert.Equal(t, 1, late.Attempt)
	require.Len(t, late.Nodes, 1)
	assert.Equal(t, 2, late.Nodes[0].Node)
	rel := rec.one(t, redlock.OpRelease)
	assert.NoError(t, rel.Err)
	assert.Equal(t, redlock.Granted, rel.Nodes[2].Outcome, "the late grant was deleted")
	assert.Empty(t, lockKeys(c.servers[2]))
}

func TestObserverSeesALeaseLostUnderDo(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	rec := &recorder{}
	l := newLocker(t, c.nodes(nil), &redlock.Options{Observer: rec})
	err := l.Do(ctx, "k", 600*time.Millisecond, func(ctx context.Context, lease *redlock.Lease) error {
		drain(t, l)
		c.setOther(t, "k", 0, 1, 2) // another holder's value everywhere: the next extension is refuted
		<-ctx.Done()
		return nil
	})
	require.ErrorIs(t, err, redlock.ErrLost)
	drain(t, l)
	lost := rec.one(t, redlock.OpLost)
	assert.ErrorIs(t, lost.Err, redlock.ErrLost)
	assert.Equal(t, "k", lost.Key)
	assert.Positive(t, lost.Duration, "how long it was held")
	ext := rec.of(redlock.OpExtend)
	require.NotEmpty(t, ext)
	assert.ErrorIs(t, ext[len(ext)-1].Err, redlock.ErrNotHeld, "the extension that found it gone")
}

func TestObserverSeesQuarantines(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	rec := &recorder{}
	l := newLocker(t, c.nodes(nil), &redlock.Options{Observer: rec})
	lease, err := l.TryLock(ctx, "k", time.Second) // every node examined
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(ctx))
	drain(t, l)
	require.Empty(t, rec.of(redlock.OpQuarantine))

	c.servers[0].FlushAll() // node 0 forgets everything, as after a restart without persistence
	lease, err = l.TryLock(ctx, "k", time.Second)
	require.NoError(t, err, "two of three")
	drain(t, l)
	q := rec.one(t, redlock.OpQuarantine)
	assert.ErrorIs(t, q.Err, redlock.ErrNodeQuarantined)
	require.Len(t, q.Nodes, 1)
	assert.Equal(t, 0, q.Nodes[0].Node)
	assert.Contains(t, q.Detail, "memory began")
	acq := rec.of(redlock.OpAcquire)
	if n := acq[len(acq)-1].Nodes[0]; n.Outcome != redlock.Unanswered {
		assert.ErrorIs(t, n.Err, redlock.ErrNodeQuarantined, "the acquisition shows the quarantined vote")
	}
	require.NoError(t, lease.Unlock(ctx))

	require.NoError(t, l.TrustNodes(ctx))
	lease, err = l.TryLock(ctx, "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(ctx))
	drain(t, l)
	end := rec.one(t, redlock.OpQuarantineEnd)
	assert.Equal(t, 0, end.Nodes[0].Node)
	assert.Len(t, rec.of(redlock.OpQuarantine), 1, "each change is told once")
}

func TestObserverSeesAClockAlarm(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	jumper := newNodeClock(c, 2, false)
	rec := &recorder{}
	l := newLocker(t, c.nodes(nil), &redlock.Options{Observer: rec})
	sample(t, l, 10)
	require.Empty(t, rec.of(redlock.OpClockAlarm))

	jumper.Advance(30 * time.Second)
	lease, err := l.TryLock(ctx, "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(ctx))
	drain(t, l) // node 2's verdict may come after the decision, reported in the background
	alarm := rec.one(t, redlock.OpClockAlarm)
	require.Len(t, alarm.Nodes, 1)
	assert.Equal(t, 2, alarm.Nodes[0].Node)
	assert.Contains(t, alarm.Detail, "jump")
	assert.Equal(t, 2, rec.one(t, redlock.OpQuarantine).Nodes[0].Node, "a jump quarantines the node too")
}

// A panicking Observer does not break the lock: the panic is recovered and
// logged, the lease returned, released and drained as without it.
func TestPanickingObserverDoesNotBreakTheLock(t *testing.T) {
	logged := &syncWriter{w: &bytes.Buffer{}}
	log.SetOutput(logged)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })

	ctx := t.Context()
	c := newCluster(t, 3)
	calls := 0
	var mu sync.Mutex
	l := newLocker(t, c.nodes(nil), &redlock.Options{Observer: redlock.ObserverFunc(func(redlock.Event) {
		mu.Lock()
		calls++
		mu.Unlock()
		panic("observer bug")
	})})
	lease, err := l.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	drain(t, l) // a majority decides: the third SET may still be on its way
	require.Equal(t, []int{0, 1, 2}, c.holding("k", lease.Value()))
	require.NoError(t, lease.Extend(ctx, 10*time.Second))
	require.NoError(t, lease.Unlock(ctx))
	c.setOther(t, "k", 1, 2)
	_, err = l.TryLock(ctx, "k", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	drain(t, l)
	assert.Empty(t, lockKeys(c.servers[0]), "the failed attempt's grant was released")
	mu.Lock()
	assert.GreaterOrEqual(t, calls, 5, "acquire, extend, unlock, acquire, release")
	mu.Unlock()
	out := logged.take()
	assert.Contains(t, out, "Options.Observer panicked on a acquire event")
	assert.Contains(t, out, "observer bug")
}

// The slog adapter: one line per event, at the level the event calls for.
func TestLogObserverLevels(t *testing.T) {
	ctx := t.Context()
	var buf bytes.Buffer
	w := &syncWriter{w: &buf}
	logger := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), &redlock.Options{Observer: redlock.NewLogObserver(logger), Owner: "worker-1"})
	lines := func() []map[string]any {
		t.Helper()
		drain(t, l)
		var out []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(w.take()), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &m), line)
			out = append(out, m)
		}
		return out
	}

	lease, err := l.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	got := lines()
	require.Len(t, got, 1)
	assert.Equal(t, "DEBUG", got[0]["level"])
	assert.Equal(t, "redlock acquire", got[0]["msg"])
	assert.Equal(t, "acquire", got[0]["op"])
	assert.Equal(t, "k", got[0]["key"])
	assert.EqualValues(t, 1, got[0]["attempt"])
	nodes, ok := got[0]["nodes"].(map[string]any)
	require.True(t, ok, "a nodes group: %v", got[0])
	require.Len(t, nodes, 3)
	for name, n := range nodes {
		assert.Contains(t, []any{"granted", "not answered before the decision"}, n.(map[string]any)["outcome"], name)
	}

	_, err = l.TryLock(ctx, "k", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	for _, line := range lines() {
		assert.Equal(t, "DEBUG", line["level"], "contention and its release: %v", line)
	}

	c.setOther(t, "k", 0, 1, 2) // the lease is gone: its unlock says exclusion may have broken
	require.ErrorIs(t, lease.Unlock(ctx), redlock.ErrNotHeld)
	got = lines()
	require.Len(t, got, 1)
	assert.Equal(t, "ERROR", got[0]["level"])
	assert.Contains(t, got[0]["err"], "not held")

	for _, m := range c.servers {
		m.Del("k")
	}
	c.servers[0].FlushAll()
	lease, err = l.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	levels := map[string]string{}
	for _, line := range lines() {
		levels[line["op"].(string)] = line["level"].(string)
	}
	assert.Equal(t, map[string]string{"acquire": "DEBUG", "quarantine": "ERROR"}, levels)
	require.NoError(t, lease.Unlock(ctx))
	lines()

	_, err = l.Revoke(ctx, "k")
	require.NoError(t, err)
	got = lines()
	require.Len(t, got, 1)
	assert.Equal(t, "WARN", got[0]["level"])
	assert.Equal(t, "revoked by worker-1: no node held the key", got[0]["detail"])

	// Below the logger's level, nothing is written.
	quiet := newLocker(t, c.nodes(nil), &redlock.Options{Observer: redlock.NewLogObserver(slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})))})
	require.NoError(t, quiet.TrustNodes(ctx))
	lease, err = quiet.TryLock(ctx, "other", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, lease.Unlock(ctx))
	drain(t, quiet)
	assert.Empty(t, w.take())
}

func TestLogLevel(t *testing.T) {
	unavailable := &redlock.QuorumError{Op: "acquire", Key: "k", Need: 2}
	for _, c := range []struct {
		e    redlock.Event
		want slog.Level
	}{
		{redlock.Event{Op: redlock.OpAcquire}, slog.LevelDebug},
		{redlock.Event{Op: redlock.OpAcquire, Err: &redlock.QuorumError{Op: "acquire", Cause: redlock.ErrNotObtained}}, slog.LevelDebug},
		{redlock.Event{Op: redlock.OpAcquire, Err: unavailable}, slog.LevelWarn},
		{redlock.Event{Op: redlock.OpExtend, Err: redlock.ErrNotHeld}, slog.LevelWarn},
		{redlock.Event{Op: redlock.OpUnlock, Err: redlock.ErrNotHeld}, slog.LevelError},
		{redlock.Event{Op: redlock.OpUnlock, Err: unavailable}, slog.LevelWarn},
		{redlock.Event{Op: redlock.OpRelease}, slog.LevelDebug},
		{redlock.Event{Op: redlock.OpRelease, Err: errors.New("left to expire")}, slog.LevelWarn},
		{redlock.Event{Op: redlock.OpLateGrant}, slog.LevelDebug},
		{redlock.Event{Op: redlock.OpLost, Err: redlock.ErrLost}, slog.LevelWarn},
		{redlock.Event{Op: redlock.OpRevoke}, slog.LevelWarn},
		{redlock.Event{Op: redlock.OpQuarantine}, slog.LevelError},
		{redlock.Event{Op: redlock.OpQuarantineEnd}, slog.LevelDebug},
		{redlock.Event{Op: redlock.OpClockAlarm}, slog.LevelError},
	} {
		assert.Equal(t, c.want, redlock.LogLevel(c.e), "%v %v", c.e.Op, c.e.Err)
	}
	for _, op := range redlock.Ops() {
		assert.NotContains(t, op.String(), "Op(", "every Op has a name")
	}
}

// syncWriter is a bytes.Buffer safe for the logger's concurrent writes.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// take returns what was written and empties the buffer.
func (s *syncWriter) take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.w.String()
	s.w.Reset()
	return out
}

// Events carry every node, however many there are: the timing of a round
// holds five nodes in itself and more in a slice of their own, and both
// give each event its own Nodes, in node order, timed where they replied.
func TestEventsCarryEveryNodeOfLargerDeployments(t *testing.T) {
	for _, n := range []int{3, 5, 6, 7} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			c := newCluster(t, n)
			rec := &recorder{}
			l := newLocker(t, c.nodes(nil), &redlock.Options{Observer: rec})
			lease, err := l.TryLock(t.Context(), "k", time.Minute)
			require.NoError(t, err)
			require.NoError(t, lease.Unlock(t.Context()))
			drain(t, l)
			acquired, unlocked := rec.one(t, redlock.OpAcquire), rec.one(t, redlock.OpUnlock)
			for _, e := range []redlock.Event{acquired, unlocked} {
				require.Len(t, e.Nodes, n, "%v", e.Op)
				for i, r := range e.Nodes {
					assert.Equal(t, i, r.Node, "%v: node order", e.Op)
					if r.Outcome == redlock.Granted {
						assert.Positive(t, r.Latency, "%v: node %d replied, untimed", e.Op, i)
					}
				}
			}
			require.NotSame(t, &acquired.Nodes[0], &unlocked.Nodes[0], "two events share their Nodes")
			for _, e := range []redlock.Event{acquired, unlocked} {
				granted := 0
				for _, r := range e.Nodes {
					if r.Outcome == redlock.Granted {
						granted++
					} else {
						assert.Equal(t, redlock.Unanswered, r.Outcome, "%v: only a node not waited for is not granted", e.Op)
					}
				}
				assert.Greater(t, granted, n/2, "%v: a majority granted", e.Op)
			}
		})
	}
}

// Each node's latency in an event is its own round trip, timed by the
// transport (the time its reply, or its pipeline batch, came back): a node
// 60ms away that the decision waited for shows at least 60ms, and no node
// more than the operation took. On both transports, since each times its
// replies its own way.
func TestEventLatenciesAreEachNodesRoundTrip(t *testing.T) {
	const away = 60 * time.Millisecond
	for _, tc := range []struct {
		name   string
		direct bool
	}{{"pipeline", false}, {"direct", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			proxies, nodes := c.proxied(t)
			proxies[0].SetDelay(0, away) // replies come back late from nodes 0 and 1:
			proxies[1].SetDelay(0, away) // the majority waits for one of them
			rec := &recorder{}
			l, err := redlock.New(nodes, &redlock.Options{Observer: rec, NodeTimeout: 5 * time.Second, NoAutoPipeline: tc.direct})
			require.NoError(t, err)
			lease, err := l.TryLock(t.Context(), "k", 10*time.Second)
			require.NoError(t, err)
			require.NoError(t, lease.Unlock(t.Context()))
			drain(t, l)
			for _, op := range []redlock.Op{redlock.OpAcquire, redlock.OpUnlock} {
				e := rec.one(t, op)
				far := 0
				for _, n := range e.Nodes {
					if n.Latency == 0 {
						continue // not waited for
					}
					assert.LessOrEqual(t, n.Latency, e.Duration, "%v: node %d took longer than the operation", op, n.Node)
					if n.Node < 2 {
						far++
						assert.GreaterOrEqual(t, n.Latency, away, "%v: node %d is %v away", op, n.Node, away)
					}
				}
				assert.Positive(t, far, "%v: the decision waited for a far node: %+v", op, e.Nodes)
			}
		})
	}
}
