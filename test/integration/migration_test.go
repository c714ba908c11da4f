package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
//
// A Locker with WaitReplicas sends each grant and its WAIT to the slot's
// master itself, so it must follow redirections itself: on its own
// ClusterClient, whose slot map predates the migration, it acquires through
// ASK while the slot migrates (the importing master's replica acknowledges)
// and through MOVED once it has moved. (Before it followed them, both
// attempts failed with the redirection as the node's error.)
func TestClusterSlotMigration(t *testing.T) {
	ctx := t.Context()
	cluster := procs.StartCluster(t, harness.SuiteServer(), 3, 1)
	cc := cluster.Client(t)
	// The Locker that waits for replicas trusts the nodes first: the ones
	// that do not wait trust them after it, so that the markers say from
	// the start that not every grant reaches every replica (had they said
	// otherwise, the first round trip of a Locker that waits for none
	// would take that back, and fail: see redlock/internal/guard/failover.go).
	waiting := newLockerOn(t, []redlock.Node{cluster.Client(t)}, &redlock.Options{WaitReplicas: 1, NodeTimeout: 2 * time.Second})
	fenced := newLockerOn(t, []redlock.Node{cc}, &redlock.Options{Fencing: true, NodeTimeout: time.Second})
	plain := newLockerOn(t, []redlock.Node{cc}, &redlock.Options{NodeTimeout: time.Second})
	const key = "migrating-lock"
	counter := "{" + key + "}:fencing"
	move, err := cluster.MoveSlotOf(ctx, cc, key)
	require.NoError(t, err)
	target := move.Target
	w, err := waiting.TryLock(ctx, key, time.Minute) // loads its slot map
	require.NoError(t, err)
	require.NoError(t, w.Unlock(ctx))

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
	w, err = waiting.TryLock(ctx, key, time.Minute)
	require.NoError(t, err, "a WaitReplicas acquisition through ASK while the slot migrates")
	require.NoError(t, w.Check(ctx))
	require.NoError(t, w.Unlock(ctx))

	// Finish the migration after a while, as reshard would, while Lock waits.
	migrated := make(chan time.Duration, 1)
	var finishing atomic.Int64 // when Finish began, since start
	start := time.Now()
	go func() {
		time.Sleep(300 * time.Millisecond)
		finishing.Store(int64(time.Since(start)))
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
	// Lock may win before Finish returns: once the key and its counter
	// have moved together, the target serves them (ASK) while Finish still
	// assigns the slot on every master. Not before Finish began: the key
	// and its counter were split between the nodes until then.
	require.GreaterOrEqual(t, waited, time.Duration(finishing.Load()), "Lock won while the slot was migrating (Finish had not begun)")
	t.Logf("Lock waited %v through a migration that settled after %v", waited.Round(time.Millisecond), settled.Round(time.Millisecond))
	require.Greater(t, b.Token(), a.Token(), "the token after the migration")
	counterOnTarget, err := target.Client.Get(ctx, counter).Result()
	require.NoError(t, err, "the counter moved with the key")
	require.NotEmpty(t, counterOnTarget)
	_, err = strconv.ParseUint(counterOnTarget, 10, 64)
	require.NoError(t, err)
	require.NoError(t, b.Unlock(ctx))

	w, err = waiting.TryLock(ctx, key, time.Minute)
	require.NoError(t, err, "a WaitReplicas acquisition through MOVED after the migration")
	require.NoError(t, target.Client.Get(ctx, key).Err(), "the lease's key on the slot's new master")
	require.NoError(t, w.Unlock(ctx))
}

// A real NAME-cli --cluster reshard of the locks' slot while four clients
// keep taking and releasing fenced leases in it, each on its own key, with
// no pause (N = 1, 3 masters): how long does a reshard keep fenced
// acquisitions out? The reshard moves the lowest-numbered slots of its
// source first, so the keys carry the hash tag {06S}, which hashes to slot 0
// (the test checks it). Every refusal must be an unavailable node
// (TRYAGAIN), never contention; each client's tokens keep growing; the
// counters moved with the keys. The log gives the measured window.
func TestClusterReshardOfTheLockSlot(t *testing.T) {
	ctx := t.Context()
	cluster := procs.StartCluster(t, harness.SuiteServer(), 3, 0)
	cc := cluster.Client(t)
	var tryAgain atomic.Int64 // TRYAGAIN replies from the nodes, before the ClusterClient's retries
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(tryAgainCounter{&tryAgain}) })
	const clients = 4
	keyOf := func(i int) string { return fmt.Sprintf("{06S}:client-%d", i) }
	slot, err := cc.ClusterKeySlot(ctx, keyOf(0)).Result()
	require.NoError(t, err)
	require.Zero(t, slot, "the locks' slot: reshard moves slot 0 first")
	source, err := cluster.MasterOfSlot(ctx, 0)
	require.NoError(t, err)
	target := cluster.Nodes[0]
	if target == source {
		target = cluster.Nodes[1]
	}
	fenced := newLockerOn(t, []redlock.Node{cc}, &redlock.Options{Fencing: true, NodeTimeout: time.Second})

	type attempt struct {
		begin, end time.Duration
		token      uint64
		err, drop  error
	}
	var (
		attempts [clients][]attempt
		granted  atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	work, stop := context.WithCancel(ctx)
	for i := range clients {
		wg.Go(func() {
			for work.Err() == nil {
				a := attempt{begin: time.Since(start)}
				lease, err := fenced.TryLock(work, keyOf(i), time.Minute)
				a.end, a.err = time.Since(start), err
				if err == nil {
					a.token = lease.Token()
					a.drop = lease.Unlock(context.WithoutCancel(ctx))
					granted.Add(1)
				}
				attempts[i] = append(attempts[i], a)
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	grants := func(n int64, what string) {
		t.Helper()
		before := granted.Load()
		eventually(t, 20*time.Second, what, func() (bool, error) { return granted.Load() >= before+n, nil })
	}
	grants(100, "fenced leases before the reshard")
	// The window: while the target lists slot 0 as importing ("[0-<-" in
	// its CLUSTER NODES), from SETSLOT IMPORTING to SETSLOT NODE, polled
	// as fast as the target answers. (MONITOR would not show SETSLOT: it
	// skips admin commands.)
	var importing struct {
		first, last time.Duration
		polls       int
	}
	polling, stopPolling := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for polling.Err() == nil {
			nodes, err := target.Client.ClusterNodes(polling).Result()
			now := time.Since(start)
			importing.polls++
			if err == nil && strings.Contains(nodes, "[0-<-") {
				if importing.first == 0 {
					importing.first = now
				}
				importing.last = now
			}
		}
	}()
	began := time.Since(start)
	took, err := cluster.Reshard(ctx, source, target, 1)
	require.NoError(t, err)
	ended := time.Since(start)
	stopPolling()
	<-polled
	grants(100, "fenced leases after the reshard")
	stop()
	wg.Wait()

	var (
		refused, total          int
		firstRefused, lastEnded time.Duration = -1, -1
		during                  int
	)
	for i, list := range attempts {
		var last uint64
		for _, a := range list {
			total++
			if a.begin < ended && a.end > began {
				during++
			}
			switch {
			case a.err == nil:
				require.NoError(t, a.drop, "client %d releasing the lease of token %d", i, a.token)
				require.Greater(t, a.token, last, "client %d's fencing tokens grow", i)
				last = a.token
			case errors.Is(a.err, redlock.ErrNotObtained):
				t.Fatalf("client %d's attempt at %v reported contention: %v", i, a.begin, a.err)
			case strings.Contains(a.err.Error(), "TRYAGAIN"):
				refused++
				if firstRefused < 0 || a.begin < firstRefused {
					firstRefused = a.begin
				}
				lastEnded = max(lastEnded, a.end)
			case work.Err() != nil && errors.Is(a.err, context.Canceled):
			default:
				t.Fatalf("client %d's attempt at %v failed other than by TRYAGAIN: %v", i, a.begin, a.err)
			}
		}
	}
	owner, err := cluster.MasterOfSlot(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, target, owner, "slot 0's master after the reshard")
	for i := range clients {
		require.NoError(t, target.Client.Get(ctx, keyOf(i)+":fencing").Err(), "client %d's counter moved with its key", i)
	}
	window := "none refused"
	if refused > 0 {
		window = fmt.Sprintf("refused from %v to %v after the reshard began", (firstRefused - began).Round(100*time.Microsecond), (lastEnded - began).Round(100*time.Microsecond))
	}
	seen := "not seen"
	if importing.first > 0 {
		seen = fmt.Sprintf("seen for %v", (importing.last - importing.first).Round(10*time.Microsecond))
	}
	t.Logf("%s --cluster reshard of slot 0 ran %v; the target's importing state was %s (%d polls); %d attempts overlapped the reshard; the nodes answered TRYAGAIN %d times; %d of %d attempts were refused with TRYAGAIN (%s)",
		harness.SuiteServer(), took.Round(time.Millisecond), seen, importing.polls, during, tryAgain.Load(), refused, total, window)
}

// tryAgainCounter counts a node client's TRYAGAIN replies.
type tryAgainCounter struct{ n *atomic.Int64 }

func (tryAgainCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h tryAgainCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if redis.HasErrorPrefix(cmd.Err(), "TRYAGAIN") {
			h.n.Add(1)
		}
		return err
	}
}

func (h tryAgainCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if redis.HasErrorPrefix(cmd.Err(), "TRYAGAIN") {
				h.n.Add(1)
			}
		}
		return err
	}
}

// Redlock over three nodes, one of them a 3-master Redis Cluster whose lock
// slot migrates (the reshard steps by hand) while three clients keep locking
// one key with fencing, extending and checking inside. The cluster node's
// fenced commands meet TRYAGAIN while the key and its counter are split, so
// it counts as an unavailable node and the two other nodes carry the
// majority: holders never overlap, no lease is lost while held, tokens keep
// growing, no attempt is reported as contention because of TRYAGAIN, and
// the clients make progress during and after the migration.
func TestRedlockWithAClusterNodeUnderMigration(t *testing.T) {
	ctx := t.Context()
	cluster, standalone := clusterAndTwo(t, 0, false)
	const key = "redlock-migrating"
	move, err := cluster.MoveSlotOf(ctx, cluster.Client(t), key)
	require.NoError(t, err)
	lockers := lockersOver(t, 3, cluster, standalone, &redlock.Options{Fencing: true, NodeTimeout: time.Second})
	run := startLockRun(t, lockers, key, 2*time.Second)
	run.progress(t, 20, "locks before the migration")
	start := time.Now()
	require.NoError(t, move.Begin(ctx))
	run.progress(t, 20, "locks while the slot migrates")
	require.NoError(t, move.Finish(ctx))
	t.Logf("slot %d migrated in %v", move.Slot, time.Since(start).Round(time.Millisecond))
	run.progress(t, 20, "locks after the migration")
	run.verify(t)
	v, err := move.Target.Client.Get(ctx, "{"+key+"}:fencing").Result()
	require.NoError(t, err, "the fencing counter on the slot's new master")
	require.NotEmpty(t, v)
}

// clientOf returns a client of p, closed when the test ends.
func clientOf(t *testing.T, p *procs.Proc) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAskToAMasterThatServesNoSlot: a slot migrates to a master just added
// to the cluster, which serves no slot yet (as redis-cli --cluster reshard
// does right after add-node), so the master is not in CLUSTER SLOTS and the
// ClusterClient offers no client of it. While the slot migrates, a plain
// acquisition of a key not on the source is answered ASK by the source; a
// guarded Locker sends the grant and the guard's companions to the slot's
// master itself, on both transports (a ClusterClient node takes the direct
// path either way), and must follow the ASK to the new master. (Before, it
// looked the address up among the masters that serve slots, found none,
// and failed every such acquisition with the ASK as the node's error.) The
// control: an unguarded Locker, through the ClusterClient, gets the lease
// too. Once the slot has moved, the lease is on the new master and
// releases from there.
func TestAskToAMasterThatServesNoSlot(t *testing.T) {
	ctx := t.Context()
	cluster := procs.StartCluster(t, harness.SuiteServer(), 3, 0)
	added := cluster.AddMaster(t)
	cc := cluster.Client(t)
	const key = "it:ask-to-new"
	move, err := cluster.MoveSlotTo(ctx, cc, key, added)
	require.NoError(t, err)
	require.Equal(t, added, move.Target)
	guarded := newLockerOn(t, []redlock.Node{cc}, &redlock.Options{NodeTimeout: 2 * time.Second})
	unguarded := newLockerOn(t, []redlock.Node{cc}, &redlock.Options{NodeTimeout: 2 * time.Second, NoQuarantine: true})
	warm, err := guarded.TryLock(ctx, key, time.Minute)
	require.NoError(t, err, "before the migration")
	require.NoError(t, warm.Unlock(ctx))

	require.NoError(t, move.Begin(ctx))
	for _, l := range []*redlock.Locker{unguarded, guarded} {
		lease, err := l.TryLock(ctx, key, time.Minute)
		require.NoError(t, err, "an acquisition redirected by ASK to a master that serves no slot")
		var exists *redis.IntCmd
		_, err = added.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			exists = p.Exists(ctx, key)
			return nil
		})
		require.NoError(t, err)
		require.EqualValues(t, 1, exists.Val(), "the key is on the importing master")
		require.NoError(t, lease.Unlock(ctx))
	}
	held, err := guarded.TryLock(ctx, key, time.Minute)
	require.NoError(t, err)
	require.NoError(t, move.Finish(ctx))
	require.NoError(t, held.Check(ctx), "the lease on the slot's new master")
	require.NoError(t, held.Unlock(ctx))
	drain(t, guarded)
	n, err := added.Client.Exists(ctx, key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "released on the new master")
}
