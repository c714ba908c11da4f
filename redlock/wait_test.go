package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// patient are options under which only a wake-up can end a wait soon: Lock
// polls once a minute, so that a test whose waiters are not woken by a
// release runs into its deadline.
var patient = &redlock.Options{RetryDelay: time.Minute, RetryJitter: time.Millisecond}

// heldByOne returns a Locker on three in-process nodes (patient: only
// wake-ups end waits soon), a context for the test (20 s), and a lease of
// key from the Locker, which its waiters queue behind.
func heldByOne(t *testing.T, key string) (*redlock.Locker, context.Context, *redlock.Lease) {
	t.Helper()
	c := newCluster(t, 3)
	l := newLocker(t, c.nodes(nil), patient)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	holder, err := l.TryLock(ctx, key, time.Minute)
	require.NoError(t, err)
	return l, ctx, holder
}

// waitFor waits until n Lock calls of l wait for key.
func waitFor(t *testing.T, l *redlock.Locker, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return redlock.Waiting(l, key) == n }, 10*time.Second, time.Millisecond, "%d Lock calls waiting for %q", n, key)
}

// queueUp starts n Lock calls on key one after another (each once the one
// before is queued); each records its index in order when it wins, holds
// for hold, and unlocks. It returns a function that waits for them all.
func queueUp(t *testing.T, ctx context.Context, l *redlock.Locker, key string, from, n int, hold time.Duration, order *[]int, mu *sync.Mutex) (wait func()) {
	var wg sync.WaitGroup
	base := redlock.Waiting(l, key)
	for i := from; i < from+n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.Lock(ctx, key, time.Minute)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			*order = append(*order, i)
			mu.Unlock()
			time.Sleep(hold)
			if err := lease.Unlock(ctx); err != nil {
				t.Errorf("waiter %d: unlock: %v", i, err)
			}
		}()
		waitFor(t, l, key, base+i-from+1)
	}
	return wg.Wait
}

// Lock calls of one Locker waiting for a key are served in the order they
// came, each woken by the release before it (no polling: Lock polls once a
// minute here, and the test's deadline is far shorter).
func TestLockWaitersTakeTurnsInArrivalOrder(t *testing.T) {
	const key = "turns"
	l, ctx, holder := heldByOne(t, key)
	var mu sync.Mutex
	var order []int
	wait := queueUp(t, ctx, l, key, 1, 6, time.Millisecond, &order, &mu)
	require.NoError(t, holder.Unlock(ctx))
	wait()
	require.Equal(t, []int{1, 2, 3, 4, 5, 6}, order)
	require.Zero(t, redlock.Waiting(l, key), "nothing kept for a key no one waits for")
}

// A Lock whose context ends leaves the queue at once, whether it waits
// behind others or is the head; the next waiter moves up, and the order of
// the rest holds.
func TestLockLeavesTheQueueWhenItsContextEnds(t *testing.T) {
	const key = "leaving"
	l, ctx, holder := heldByOne(t, key)

	var mu sync.Mutex
	var order []int
	headCtx, cancelHead := context.WithCancel(ctx)
	middleCtx, cancelMiddle := context.WithCancel(ctx)
	gaveUp := make(chan error, 2)
	for i, wctx := range []context.Context{headCtx, middleCtx} {
		go func() {
			_, err := l.Lock(wctx, key, time.Minute)
			gaveUp <- err
		}()
		waitFor(t, l, key, i+1)
	}
	wait := queueUp(t, ctx, l, key, 3, 2, 0, &order, &mu)
	waitFor(t, l, key, 4)

	cancelMiddle()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	waitFor(t, l, key, 3)
	cancelHead()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	waitFor(t, l, key, 2)

	require.NoError(t, holder.Unlock(ctx))
	wait()
	require.Equal(t, []int{3, 4}, order)
}

// A client that releases and at once locks again goes behind those already
// waiting, however quick it is.
func TestRelockGoesBehindTheWaiters(t *testing.T) {
	const key = "relock"
	l, ctx, holder := heldByOne(t, key)
	var mu sync.Mutex
	var order []int
	wait := queueUp(t, ctx, l, key, 1, 2, 5*time.Millisecond, &order, &mu)

	require.NoError(t, holder.Unlock(ctx))
	again, err := l.Lock(ctx, key, time.Minute)
	require.NoError(t, err)
	mu.Lock()
	got := append([]int(nil), order...)
	mu.Unlock()
	require.Equal(t, []int{1, 2}, got, "the waiters before the client that locked again")
	require.NoError(t, again.Unlock(ctx))
	wait()
}

// A release that comes after the head's attempt found the key taken, but
// before the head waits, still wakes it: the waiter is queued, and its
// wake-up kept, from before its first attempt. Here every node's reply to
// the head's SET is held until the holder's Unlock has returned, so that
// the release falls in that window; Lock polls once a minute, so only the
// kept wake-up ends the wait in time.
func TestReleaseBetweenAttemptAndWaitIsNotMissed(t *testing.T) {
	c := newCluster(t, 3)
	var holder atomic.Pointer[redlock.Lease]
	var once sync.Once
	released := make(chan error, 1)
	nodes := c.nodes(func(_ int, n redlock.Node) redlock.Node {
		return &hookNode{Node: n, afterDo: func(args []any) error {
			if h := holder.Load(); h != nil && strings.EqualFold(fmt.Sprint(args[0]), "set") && args[2] != h.Value() {
				once.Do(func() { released <- h.Unlock(context.Background()) })
			}
			return nil
		}}
	})
	l := newLocker(t, nodes, patient)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const key = "window"
	h, err := l.TryLock(ctx, key, time.Minute)
	require.NoError(t, err)
	holder.Store(h)
	lease, err := l.Lock(ctx, key, time.Minute)
	require.NoError(t, err, "the waiter was not woken by the release in the window")
	require.NoError(t, <-released)
	require.NoError(t, lease.Unlock(ctx))
}

// Contenders in two Lockers that split the nodes between them (each wins
// one of three, the third fails every vote) do not keep each other out:
// after each split, a contender waits a growing random time, so that one
// tries alone and wins. The run without that backoff (and no jitter) is
// logged beside it: in this process the two fall out of step by
// themselves often enough that it is no reliable control (the CLI's
// slow-WAIT scenario is; see docs/performance.md), so only the steady
// grants with the backoff are required.
func TestSplitVotesKeepGrantingLeases(t *testing.T) {
	run := func(t *testing.T, hooks unsafelocker.Hooks) (granted int) {
		c := newCluster(t, 3)
		// Node 0 answers Locker "a" at once and "b" 3ms late, node 1 the
		// reverse; node 2 fails every SET after 30ms, as a replicated node
		// whose WAIT runs to its timeout: two attempts at once split, and
		// each lasts until node 2 has failed it, which keeps them in step.
		late := func(first string) func(ctx context.Context, args []any) error {
			return func(ctx context.Context, args []any) error {
				if v, ok := args[2].(string); ok && !strings.HasPrefix(v, first+"|") {
					time.Sleep(3 * time.Millisecond)
				}
				return nil
			}
		}
		nodes := c.nodes(func(i int, n redlock.Node) redlock.Node {
			switch i {
			case 0:
				return &hookNode{Node: n, beforeDo: late("a")}
			case 1:
				return &hookNode{Node: n, beforeDo: late("b")}
			}
			return &hookNode{Node: n, beforeDo: func(context.Context, []any) error {
				time.Sleep(30 * time.Millisecond) // a WAIT that runs to its timeout
				return errInjected
			}}
		})
		opts := func(owner string) *redlock.Options {
			return withHooks(&redlock.Options{Owner: owner, RetryDelay: 5 * time.Millisecond, RetryJitter: 0, NodeTimeout: time.Second}, hooks)
		}
		a, b := newLocker(t, nodes, opts("a")), newLocker(t, nodes, opts("b"))
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		var n atomic.Int64
		var wg sync.WaitGroup
		for _, l := range []*redlock.Locker{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					lease, err := l.Lock(ctx, "split", time.Minute)
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("Lock: %v", err)
						}
						return
					}
					n.Add(1)
					_ = lease.Unlock(context.Background())
				}
			}()
		}
		wg.Wait()
		return int(n.Load())
	}
	safe := run(t, unsafelocker.Hooks{})
	control := run(t, unsafelocker.Hooks{NoSplitBackoff: true})
	t.Logf("leases granted in 2s: %d with the backoff, %d without (the control)", safe, control)
	require.GreaterOrEqual(t, safe, 20, "leases granted with the split backoff")
}

// headMarker marks the context of the head whose attempt is held up.
type headMarker struct{}

// A release by this Locker that wakes the head while the head is giving up
// (its ctx ends during its attempt) is not lost: the head leaves without
// taking it, and the next waiter, moved up with the key not held here,
// tries at once. Lock polls once a minute here (patient): before the fix
// the next waiter took its promotion as the only wake-up and ran into its
// deadline with the key free.
func TestReleaseToAHeadThatLeavesIsPassedOn(t *testing.T) {
	c := newCluster(t, 3)
	var armed atomic.Bool
	nodes := c.nodes(func(_ int, n redlock.Node) redlock.Node {
		return &hookNode{Node: n, beforeDo: func(ctx context.Context, args []any) error {
			if !strings.EqualFold(fmt.Sprint(args[0]), "set") || ctx.Value(headMarker{}) == nil || !armed.Load() {
				return nil
			}
			bctx := ctx.Value(headMarker{}).(context.Context)
			<-bctx.Done() // B's attempt is in flight until B gives up
			return bctx.Err()
		}}
	})
	l := newLocker(t, nodes, patient)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const key = "lost-wake"
	holder, err := l.TryLock(ctx, key, time.Minute)
	require.NoError(t, err)
	armed.Store(true)

	bctx, cancelB := context.WithCancel(ctx)
	bctx = context.WithValue(bctx, headMarker{}, bctx)
	bDone := make(chan error, 1)
	go func() {
		_, err := l.Lock(bctx, key, time.Minute)
		bDone <- err
	}()
	waitFor(t, l, key, 1)
	time.Sleep(50 * time.Millisecond) // B is in its first attempt (blocked)

	cctx, cancelC := context.WithTimeout(ctx, 3*time.Second)
	defer cancelC()
	cDone := make(chan error, 1)
	go func() {
		lease, err := l.Lock(cctx, key, time.Minute)
		if err == nil {
			_ = lease.Unlock(context.Background())
		}
		cDone <- err
	}()
	waitFor(t, l, key, 2)

	require.NoError(t, holder.Unlock(ctx)) // wakes the head, B
	cancelB()                              // B gives up before using the wake-up
	require.ErrorIs(t, <-bDone, context.Canceled)
	armed.Store(false)

	start := time.Now()
	err = <-cDone
	require.NoError(t, err, "the key was free (released by this Locker) %v before C gave up", time.Since(start))
}

// A Lock's attempt that finds another value on one node, with the node it
// would need still to answer (slow: a WAIT that runs to its timeout, say),
// stops waiting for it soon and loses, so that it does not hold its other
// grants meanwhile (two contenders that split the fast nodes would each
// keep the other out for the slow node's time, attempt after attempt).
// Control: TryLock, which has no next try, waits for the slow node.
func TestALockThatFindsContentionDoesNotWaitForTheSlowNode(t *testing.T) {
	// The slow node's time is long against the fast nodes' replies even on
	// a loaded machine under the race detector (they took over 250 ms there).
	const slow = 2 * time.Second
	c := newCluster(t, 3)
	nodes := c.nodes(func(i int, n redlock.Node) redlock.Node {
		if i != 2 {
			return n
		}
		return &hookNode{Node: n, beforeDo: func(context.Context, []any) error {
			time.Sleep(slow)
			return errInjected
		}}
	})
	c.setOther(t, "k", 1) // node 1: another holder's value
	for _, bc := range []struct {
		name    string
		acquire func(ctx context.Context, l *redlock.Locker) error
		quick   bool // the first attempt ends well before the slow node answers
	}{
		{"lock", func(ctx context.Context, l *redlock.Locker) error {
			ctx, cancel := context.WithTimeout(ctx, slow*3/4)
			defer cancel()
			_, err := l.Lock(ctx, "k", time.Minute)
			return err
		}, true},
		{"control-trylock", func(ctx context.Context, l *redlock.Locker) error {
			_, err := l.TryLock(ctx, "k", time.Minute)
			return err
		}, false},
	} {
		t.Run(bc.name, func(t *testing.T) {
			rec := &recorder{}
			l := newLocker(t, nodes, &redlock.Options{NodeTimeout: 5 * time.Second, RetryDelay: time.Minute, Observer: rec})
			require.Error(t, bc.acquire(t.Context(), l))
			drain(t, l)
			first := rec.of(redlock.OpAcquire)[0]
			var q *redlock.QuorumError
			require.ErrorAs(t, first.Err, &q)
			assert.Equal(t, 1, q.Granted, "node 0 granted")
			assert.Equal(t, redlock.Taken, q.Nodes[1].Outcome)
			if bc.quick {
				assert.Less(t, first.Duration, slow/2, "the attempt stopped waiting for the slow node")
				require.ErrorIs(t, q.Nodes[2].Err, quorum.ErrNoReply)
				assert.Contains(t, q.Nodes[2].Err.Error(), "not waited for")
			} else {
				assert.GreaterOrEqual(t, first.Duration, slow*9/10, "TryLock waited for the slow node")
				require.ErrorIs(t, q.Nodes[2].Err, errInjected)
			}
			assert.False(t, c.servers[0].Exists("k"), "node 0's grant was released")
		})
	}
}

// takenNode is an in-memory Node on which the key is always held by someone
// else: every SET is contention, every script finds nothing of ours. It has
// no network, so it runs inside a synctest bubble.
type takenNode struct {
	mu   sync.Mutex
	sets []time.Time
}

func (n *takenNode) Do(ctx context.Context, args ...any) *redis.Cmd {
	if guardCompanion(args) { // not recorded; its answer keeps the guard from deciding, and a refusal stays a refusal
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetVal("someone-else")
		return cmd
	}
	n.mu.Lock()
	n.sets = append(n.sets, time.Now())
	n.mu.Unlock()
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetVal("someone-else")
	return cmd
}

func (n *takenNode) script(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetVal(int64(-1))
	return cmd
}

func (n *takenNode) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return n.script(ctx)
}
func (n *takenNode) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return n.script(ctx)
}
func (n *takenNode) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return n.script(ctx)
}
func (n *takenNode) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return n.script(ctx)
}
func (n *takenNode) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceCmd(ctx)
}
func (n *takenNode) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	return redis.NewStringCmd(ctx)
}

// Behaviour 6: Lock waits a random delay in [RetryDelay, RetryDelay+RetryJitter)
// between attempts, never spins, and stops when the context ends. Fake time
// (synctest) makes the gaps exact.
func TestLockRetryDelaysAreJittered(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		nodes := []*takenNode{{}, {}, {}}
		l, err := redlock.New([]redlock.Node{nodes[0], nodes[1], nodes[2]}, &redlock.Options{
			RetryDelay:  10 * time.Millisecond,
			RetryJitter: 5 * time.Millisecond,
		})
		require.NoError(t, err)

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		_, err = l.Lock(ctx, "k", time.Minute)
		assert.Equal(t, time.Second, time.Since(start), "Lock must stop when the context ends")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, redlock.ErrNotObtained)

		sets := nodes[0].sets
		require.Greater(t, len(sets), 60, "about 1s/12.5ms attempts")
		require.Less(t, len(sets), 101, "an attempt every 10ms at most")
		gaps := map[time.Duration]bool{}
		for i := 1; i < len(sets); i++ {
			gap := sets[i].Sub(sets[i-1])
			assert.GreaterOrEqual(t, gap, 10*time.Millisecond)
			assert.Less(t, gap, 15*time.Millisecond)
			gaps[gap] = true
		}
		assert.Greater(t, len(gaps), 10, "delays must be random, not fixed")
		require.NoError(t, l.Drain(t.Context()))
	})
}

// A context that ends during the retry wait is reported even if the last
// attempt failed for another reason.
func TestLockGivesUpWithBothCauses(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		l, err := redlock.New([]redlock.Node{&takenNode{}}, &redlock.Options{RetryDelay: time.Hour})
		require.NoError(t, err)
		ctx, cancel := context.WithCancelCause(t.Context())
		shutdown := errors.New("shutting down")
		time.AfterFunc(time.Minute, func() { cancel(shutdown) })
		_, err = l.Lock(ctx, "k", time.Minute)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, shutdown)
		assert.ErrorIs(t, err, redlock.ErrNotObtained)
		assert.Contains(t, err.Error(), "gave up after 1 attempts")
	})
}

// TestHugeRetryDelayWaitsInsteadOfSpinning: a RetryDelay meant as "rely on
// wake-ups" (math.MaxInt64), with any jitter, makes Lock wait for the key's
// release (or its context) after its first attempts, never spin: the sum of
// delay and jitter saturates instead of wrapping to a negative wait.
// Control: a short RetryDelay polls many times in the same window.
func TestHugeRetryDelayWaitsInsteadOfSpinning(t *testing.T) {
	c := newCluster(t, 3)
	c.setOther(t, "busy", 0, 1, 2)
	count := func(t *testing.T, opts redlock.Options) int {
		t.Helper()
		var tries attempts
		opts.Observer = &tries
		opts.NoWakeUps = true
		l := newLocker(t, c.nodes(nil), &opts)
		ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
		defer cancel()
		_, err := l.Lock(ctx, "busy", time.Second)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		drain(t, l)
		return tries.count()
	}
	for _, jitter := range []time.Duration{0, time.Millisecond, math.MaxInt64} {
		t.Run(fmt.Sprint("jitter ", jitter), func(t *testing.T) {
			n := count(t, redlock.Options{RetryDelay: math.MaxInt64, RetryJitter: jitter})
			assert.LessOrEqual(t, n, 2, "attempts in 400ms with RetryDelay math.MaxInt64")
		})
	}
	t.Run("control: a short delay polls", func(t *testing.T) {
		assert.Greater(t, count(t, redlock.Options{RetryDelay: time.Millisecond, RetryJitter: time.Millisecond}), 2, "attempts in 400ms with a RetryDelay of 1ms")
	})
}
