package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/redlock/redlock/test/integration/procs"
)

// A slot migration under a cluster node (N = 1, 3 masters), done by hand as
// redis-cli --cluster reshard does it: SETSLOT IMPORTING / MIGRATING, MIGRATE
// of the keys, SETSLOT NODE. While the lock's slot migrates:
//   - a held fenced lease still checks and extends, and contention is still
//     ErrNotObtained (the key and its counter are both on the source);
//   - once the key is gone from the source but its counter is not, a fenced
//     acquisition names two keys that are not all on one side, and Redis
//     answers TRYAGAIN: the attempt fails as an unavailable node, never as
//     contention, and leaves nothing behind;
//   - a plain acquisition (one key) goes through the ASK redirection;
//   - Lock, given a deadline, waits through the migration and gets its
//     fenced lease once the slot is settled, with a higher token.
func TestClusterSlotMigration(t *testing.T) {
	ctx := t.Context()
	cluster := procs.StartCluster(t, harness.SuiteServer(), 3, 0)
	cc := cluster.Client(t)
	fenced := newLockerOn(t, []redlock.Node{cc}, &redlock.Options{Fencing: true, NodeTimeout: time.Second})
	plain := newLockerOn(t, []redlock.Node{cc}, &redlock.Options{NodeTimeout: time.Second})
	const key = "migrating-lock"
	counter := "{" + key + "}:fencing"
	move, err := cluster.MoveSlotOf(ctx, cc, key)
	require.NoError(t, err)
	target := move.Target

	a, err := fenced.TryLock(ctx, key, time.Minute)
	require.NoError(t, err)
	require.NoError(t, move.Begin(ctx))

	require.NoError(t, a.Check(ctx), "a held lease while its slot migrates")
	require.NoError(t, a.Extend(ctx, time.Minute))
	_, err = fenced.TryLock(ctx, key, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "contention while the slot migrates")
	require.NoError(t, a.Unlock(ctx))

	// The key is gone from the source, its counter is not: a fenced
	// acquisition cannot run on either side.
	for range 5 {
		_, err = fenced.TryLock(ctx, key, time.Minute)
		require.Error(t, err)
		require.NotErrorIs(t, err, redlock.ErrNotObtained, "TRYAGAIN reported as contention")
		require.Contains(t, err.Error(), "TRYAGAIN")
	}
	drain(t, fenced)
	p, err := plain.TryLock(ctx, key, time.Minute)
	require.NoError(t, err, "a plain acquisition through ASK while the slot migrates")
	require.NoError(t, p.Unlock(ctx))

	// Finish the migration after a while, as reshard would, while Lock waits.
	migrated := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		time.Sleep(300 * time.Millisecond)
		if err := move.Finish(context.Background()); err != nil {
			t.Errorf("finishing the migration: %v", err)
		}
		migrated <- time.Since(start)
	}()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := fenced.Lock(lctx, key, time.Minute)
	waited := time.Since(start)
	require.NoError(t, err, "Lock through the migration")
	settled := <-migrated
	require.GreaterOrEqual(t, waited, settled-50*time.Millisecond, "Lock won before the slot was settled")
	t.Logf("Lock waited %v through a migration that settled after %v", waited.Round(time.Millisecond), settled.Round(time.Millisecond))
	require.Greater(t, b.Token(), a.Token(), "the token after the migration")
	counterOnTarget, err := target.Client.Get(ctx, counter).Result()
	require.NoError(t, err, "the counter moved with the key")
	require.NotEmpty(t, counterOnTarget)
	_, err = strconv.ParseUint(counterOnTarget, 10, 64)
	require.NoError(t, err)
	require.NoError(t, b.Unlock(ctx))
}

// Redlock over three nodes, one of them a 3-master Redis Cluster whose lock
// slot migrates (the reshard steps by hand) while three clients keep locking
// one key with fencing, extending and checking inside. The cluster node's
// fenced commands meet TRYAGAIN while the key and its counter are split, so
// it counts as an unavailable node and the two other nodes carry the
// majority: holders never overlap, tokens keep growing, no attempt is
// reported as contention because of TRYAGAIN, and the clients make progress
// during and after the migration.
func TestRedlockWithAClusterNodeUnderMigration(t *testing.T) {
	ctx := t.Context()
	server := harness.SuiteServer()
	cluster := procs.StartCluster(t, server, 3, 0)
	bin := procs.Binary(t, server, "server")
	var standalone []*procs.Proc
	for i := range 2 {
		port, err := procs.FreePort()
		require.NoError(t, err)
		standalone = append(standalone, procs.Start(t, "standalone "+strconv.Itoa(i), bin, port, "--save", "", "--appendonly", "no"))
	}
	newNodes := func() []redlock.Node {
		nodes := []redlock.Node{cluster.Client(t)}
		for _, p := range standalone {
			c := redis.NewClient(&redis.Options{Addr: p.Addr})
			t.Cleanup(func() { c.Close() })
			nodes = append(nodes, c)
		}
		return nodes
	}
	const key = "redlock-migrating"
	counter := "{" + key + "}:fencing"
	move, err := cluster.MoveSlotOf(ctx, cluster.Client(t), key)
	require.NoError(t, err)

	var (
		mu                         sync.Mutex
		inside, overlaps           int
		lastToken                  uint64
		regressed, misread         []string
		acquired, lostInside, errs int
	)
	work, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 3 {
		l := newLockerOn(t, newNodes(), &redlock.Options{Fencing: true, NodeTimeout: time.Second})
		wg.Go(func() {
			for work.Err() == nil {
				lctx, cancel := context.WithTimeout(work, 3*time.Second)
				lease, err := l.Lock(lctx, key, 2*time.Second)
				cancel()
				if err != nil {
					mu.Lock()
					if strings.Contains(err.Error(), "TRYAGAIN") && errors.Is(err, redlock.ErrNotObtained) && !strings.Contains(err.Error(), "held by another value") {
						misread = append(misread, err.Error())
					}
					errs++
					mu.Unlock()
					continue
				}
				mu.Lock()
				inside++
				if inside > 1 {
					overlaps++
				}
				if lease.Token() <= lastToken {
					regressed = append(regressed, fmt.Sprintf("%d after %d", lease.Token(), lastToken))
				}
				lastToken = max(lastToken, lease.Token())
				acquired++
				mu.Unlock()
				if lease.Extend(work, 2*time.Second) != nil || lease.Check(work) != nil {
					mu.Lock()
					lostInside++
					mu.Unlock()
				}
				mu.Lock()
				inside--
				mu.Unlock()
				_ = lease.Unlock(context.WithoutCancel(ctx))
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	count := func() int { mu.Lock(); defer mu.Unlock(); return acquired }
	progress := func(what string) {
		t.Helper()
		before := count()
		eventually(t, 20*time.Second, what, func() (bool, error) { return count() >= before+20, nil })
	}
	progress("locks before the migration")

	start := time.Now()
	require.NoError(t, move.Begin(ctx))
	progress("locks while the slot migrates")
	require.NoError(t, move.Finish(ctx))
	t.Logf("slot %d migrated in %v", move.Slot, time.Since(start).Round(time.Millisecond))
	progress("locks after the migration")
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d acquisitions, last token %d, %d failed attempts, %d leases that failed to extend or check", acquired, lastToken, errs, lostInside)
	require.Zero(t, overlaps, "two holders at once")
	require.Empty(t, regressed, "fencing tokens that did not grow")
	require.Empty(t, misread, "TRYAGAIN reported as contention")
	v, err := move.Target.Client.Get(ctx, counter).Result()
	require.NoError(t, err, "the fencing counter on the slot's new master")
	require.NotEmpty(t, v)
}
