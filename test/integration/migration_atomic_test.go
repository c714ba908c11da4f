package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/procs"
)

// atomicMigrationServer is the server whose atomic slot migration the test
// below drives: Valkey 9 added it (CLUSTER MIGRATESLOTS). Redis 7.0 and 8.0
// and Valkey 8.1 have only the classic path, which TestClusterSlotMigration
// and TestClusterReshardOfTheLockSlot drive on the suite's server.
const atomicMigrationServer = "valkey:9.1"

// Valkey 9's atomic slot migration of a lock's slot under a held fenced
// lease (N = 1, 3 masters). The source keeps serving the slot while it
// streams the slot's keys to the target, then hands the slot over in one
// step, so unlike the classic path (SETSLOT MIGRATING, MIGRATE, ASK and
// TRYAGAIN) no command of the lease ever meets a slot split between two
// masters. While it runs (the slot holds filler keys, so that it takes a
// while) a holder extends and checks its lease and a contender keeps trying
// the same key:
//   - the contender never gets the lock, before, during or after the move,
//     and the holder never hears its lease is lost;
//   - the lease stays held on the new master: it checks, extends, and its
//     key holds its value there with a TTL no longer than its last
//     extension gave;
//   - the fencing counter moved with the slot: the next lease's token is
//     higher than every token before;
//   - the release deletes the key on the new master.
//
// The holder's calls may fail while the source pauses writes for the
// hand-over (an unavailable node, never a lost lease): the test counts them
// and logs how many there were and how long the move took. The negative
// control is TestClusterSlotHandedOverWithoutItsKeys.
func TestClusterAtomicSlotMigration(t *testing.T) {
	ctx := t.Context()
	cluster := procs.StartCluster(t, atomicMigrationServer, 3, 0)
	const key = "atomically-migrating-lock"
	opts := &redlock.Options{Fencing: true, NodeTimeout: time.Second}
	m := leaseThroughAMove(t, cluster, key, opts, true, (*procs.SlotMove).Atomically)
	require.NoError(t, m.err, "the atomic migration")
	require.Empty(t, m.doubleGrants)
	require.NoError(t, m.holderLost)
	require.Positive(t, m.refused, "the contender was never refused: it never tried")

	// On the new master, after the move.
	a := m.holder
	require.NoError(t, a.Check(ctx), "the lease after its slot moved")
	asked := time.Now()
	require.NoError(t, a.Extend(ctx, time.Minute), "the lease extends on the new master")
	value, err := m.move.Target.Client.Get(ctx, key).Result()
	require.NoError(t, err, "the lease's key on the slot's new master")
	require.Equal(t, a.Value(), value)
	ttl, err := m.move.Target.Client.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.LessOrEqual(t, ttl, time.Minute+time.Since(asked), "the key's TTL on the new master")
	_, err = m.contender.TryLock(ctx, key, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "contention after the move")
	require.NoError(t, a.Unlock(ctx))
	require.Zero(t, m.move.Target.Client.Exists(ctx, key).Val(), "the release deleted the key on the new master")

	b, err := m.contender.TryLock(ctx, key, time.Minute)
	require.NoError(t, err, "a fenced acquisition after the move")
	require.Greater(t, b.Token(), a.Token(), "the token after the move: the counter moved with the slot")
	require.NoError(t, b.Unlock(ctx))
}

// The negative control of TestClusterAtomicSlotMigration: the same
// scenario with a hand-over that drops the slot's keys (CLUSTER FLUSHSLOT on
// the source, then SETSLOT NODE), as a botched migration would, while the
// holder does nothing (a holder that checks would hear its lease is lost,
// and one that extends would set its key again). Without the node guard
// (NoQuarantine) the contender gets the lock while the holder believes it
// holds it, and the test sees it. With the guard, the node's memory of the
// slot is gone with its marker, so the node is quarantined and the
// contender is refused as unavailable: no double grant.
func TestClusterSlotHandedOverWithoutItsKeys(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		name := map[bool]string{false: "NoQuarantine", true: "guarded"}[guarded]
		t.Run(name, func(t *testing.T) {
			cluster := procs.StartCluster(t, atomicMigrationServer, 3, 0)
			opts := &redlock.Options{Fencing: true, NodeTimeout: time.Second, NoQuarantine: !guarded}
			m := leaseThroughAMove(t, cluster, "lock-handed-over-without-keys", opts, false, (*procs.SlotMove).WithoutKeys)
			require.NoError(t, m.err, "the hand-over")
			if guarded {
				require.Empty(t, m.doubleGrants, "the guard let the contender in after the keys were lost")
				require.Positive(t, m.contenderErrors, "the contender was never refused as unavailable: the node was not quarantined")
			} else {
				require.NotEmpty(t, m.doubleGrants, "the test saw no double grant after a hand-over that lost the lease's key")
			}
		})
	}
}

// movedLease is what leaseThroughAMove saw.
type movedLease struct {
	move      *procs.SlotMove
	holder    *redlock.Lease
	contender *redlock.Locker
	err       error         // the move's
	took      time.Duration // the move's
	// doubleGrants: the contender got the lock while the holder believed
	// it held it (validity left).
	doubleGrants                                 []error
	holderLost                                   error // the holder's extension or check said ErrNotHeld
	held, holderFailed, refused, contenderErrors int64
}

// leaseThroughAMove takes a lease on key through a Redis Cluster as one
// node, then moves the key's slot to another master with handOver while a
// contender (another Locker and ClusterClient) keeps trying the key and,
// if holderActs, the holder keeps extending and checking, until 100 ms
// after the move.
func leaseThroughAMove(t *testing.T, cluster *procs.Cluster, key string, opts *redlock.Options, holderActs bool, handOver func(*procs.SlotMove, context.Context) error) *movedLease {
	t.Helper()
	ctx := t.Context()
	cc := cluster.Client(t)
	holding := newLockerOn(t, []redlock.Node{cc}, opts)
	m := &movedLease{contender: newLockerOn(t, []redlock.Node{cluster.Client(t)}, opts)}
	var err error
	m.move, err = cluster.MoveSlotOf(ctx, cc, key)
	require.NoError(t, err)

	// Filler in the lock's slot: a migration streams it before the
	// hand-over, which leaves the holder and the contender time to act.
	const fillers = 20000
	pipe := m.move.Source.Client.Pipeline()
	for i := range fillers {
		pipe.Set(ctx, "{"+key+"}:filler-"+strconv.Itoa(i), "x", time.Hour)
	}
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)

	a, err := holding.TryLock(ctx, key, time.Minute)
	require.NoError(t, err)
	m.holder = a
	var (
		stop                                         atomic.Bool
		wg                                           sync.WaitGroup
		held, holderFailed, refused, contenderErrors atomic.Int64
		mu                                           sync.Mutex
	)
	doubleGrant := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(m.doubleGrants) < 10 {
			m.doubleGrants = append(m.doubleGrants, err)
		}
	}
	wg.Go(func() {
		for holderActs && !stop.Load() {
			err := a.Extend(ctx, time.Minute)
			if err == nil {
				err = a.Check(ctx)
			}
			switch {
			case err == nil:
				held.Add(1)
			case errors.Is(err, redlock.ErrNotHeld):
				m.holderLost = err
				return
			default:
				holderFailed.Add(1) // the node unavailable for a moment
			}
		}
	})
	wg.Go(func() {
		for !stop.Load() {
			b, err := m.contender.TryLock(ctx, key, time.Minute)
			switch {
			case err == nil:
				if left := a.Validity(); left > 0 {
					doubleGrant(fmt.Errorf("the contender got the lock (token %d) while the holder believed it held it (token %d) for %v more", b.Token(), a.Token(), left.Round(time.Millisecond)))
				}
				_ = b.Unlock(ctx)
			case errors.Is(err, redlock.ErrNotObtained):
				refused.Add(1)
			default:
				contenderErrors.Add(1)
			}
		}
	})

	time.Sleep(50 * time.Millisecond) // both at work before the move begins
	start := time.Now()
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	m.err = handOver(m.move, mctx)
	cancel()
	m.took = time.Since(start)
	time.Sleep(100 * time.Millisecond) // and both at work after it
	stop.Store(true)
	wg.Wait()
	m.held, m.holderFailed, m.refused, m.contenderErrors = held.Load(), holderFailed.Load(), refused.Load(), contenderErrors.Load()
	t.Logf("the move of %d keys took %v; the holder extended and checked %d times (%d calls failed as unavailable; lost: %v), the contender was refused %d times (%d errors); double grants: %v",
		fillers+2, m.took.Round(time.Millisecond), m.held, m.holderFailed, m.holderLost, m.refused, m.contenderErrors, m.doubleGrants)
	return m
}

// The move's helper itself: a slot that another master serves once
// Atomically returns, on every master's word, with its keys. (So that the
// test above moves what it says it moves.)
func TestAtomicSlotMoveMovesTheSlotAndItsKeys(t *testing.T) {
	ctx := t.Context()
	cluster := procs.StartCluster(t, atomicMigrationServer, 3, 0)
	cc := cluster.Client(t)
	const key = "moved-by-the-helper"
	require.NoError(t, cc.Set(ctx, key, "v", time.Minute).Err())
	move, err := cluster.MoveSlotOf(ctx, cc, key)
	require.NoError(t, err)
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, move.Atomically(mctx))
	owner, err := cluster.MasterOfSlot(ctx, move.Slot)
	require.NoError(t, err)
	require.Same(t, move.Target, owner)
	require.Equal(t, "v", move.Target.Client.Get(ctx, key).Val())
	require.Zero(t, move.Source.Client.DBSize(context.Background()).Val(), "the source kept the moved key")
}
