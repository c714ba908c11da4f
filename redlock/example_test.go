package redlock_test

import (
	"context"
	"crypto/fips140"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock"
)

func Example() {
	// Three independent Redis masters; in-process servers stand in for them here.
	var nodes []redlock.Node
	for range 3 {
		srv, _ := startRedis()
		defer srv.Close()
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	}
	// nil would mean the defaults; the 50ms NodeTimeout suits a LAN, while
	// these in-process servers share a busy test machine.
	locker, err := redlock.New(nodes, &redlock.Options{NodeTimeout: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Dial every node and load the scripts before the first lock, so that
	// it does not spend its NodeTimeout on handshakes.
	if err := locker.Warm(ctx); err != nil {
		fmt.Println("not every node is ready:", err)
	}
	// These servers were just started and hold no locks: trust them, or the
	// node guard keeps each out of the quorum until MaxTTL after its memory
	// began. Once the deployment is in use, this does nothing.
	trusted, err := locker.TrustNewNodes(ctx)
	if err != nil {
		fmt.Println(err)
	}
	fmt.Println("new servers trusted:", trusted)
	lease, err := locker.Lock(ctx, "invoice:42", 10*time.Second)
	if err != nil {
		fmt.Println("not locked:", err)
		return
	}
	defer lease.Unlock(ctx)
	fmt.Println("held for about 10s:", lease.Validity() > 9*time.Second)

	// Another attempt while the lease is held is contention.
	_, err = locker.TryLock(ctx, "invoice:42", 10*time.Second)
	fmt.Println("contended:", errors.Is(err, redlock.ErrNotObtained))

	// Long work: extend before the validity runs out.
	fmt.Println("extend:", lease.Extend(ctx, 10*time.Second))
	// Output:
	// new servers trusted: true
	// held for about 10s: true
	// contended: true
	// extend: <nil>
}

// Warm reports, per node, what keeps a node from being ready.
func ExampleLocker_Warm() {
	up, _ := startRedis()
	defer up.Close()
	down, _ := startRedis()
	downAddr := down.Addr()
	down.Close() // now refuses connections
	locker, _ := redlock.New([]redlock.Node{
		redis.NewClient(&redis.Options{Addr: up.Addr()}),
		redis.NewClient(&redis.Options{Addr: downAddr, MaxRetries: -1}),
	}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var warm *redlock.WarmError
	if err := locker.Warm(ctx); errors.As(err, &warm) {
		for _, n := range warm.Nodes {
			fmt.Printf("node %d: %v\n", n.Node, n.Outcome)
		}
	}
	// Output:
	// node 0: granted
	// node 1: failed
}

// Every go-redis client shape is a Node.
var (
	_ redlock.Node = (*redis.Client)(nil)
	_ redlock.Node = (*redis.ClusterClient)(nil)
	_ redlock.Node = (*redis.Ring)(nil)
	_ redlock.Node = redis.UniversalClient(nil)
)

// An Observer must not block: this one hands each event to a buffered
// channel that another goroutine drains, and counts what it had to drop
// when that goroutine falls behind, rather than slow the lock down.
func ExampleObserver() {
	srv, _ := startRedis()
	defer srv.Close()
	events := make(chan redlock.Event, 1024)
	var dropped atomic.Int64
	observer := redlock.ObserverFunc(func(e redlock.Event) {
		select {
		case events <- e:
		default:
			dropped.Add(1)
		}
	})
	locker, err := redlock.New([]redlock.Node{redis.NewClient(&redis.Options{Addr: srv.Addr()})},
		&redlock.Options{NodeTimeout: time.Second, Observer: observer, Owner: "billing-worker"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	_ = locker.TrustNodes(ctx) // a new server, known to hold no locks
	lease, err := locker.TryLock(ctx, "invoice:42", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = locker.TryLock(ctx, "invoice:42", 10*time.Second) // contention
	fmt.Println("contended:", errors.Is(err, redlock.ErrNotObtained))
	_ = lease.Unlock(ctx)
	_ = locker.Drain(ctx) // background events (releases, late grants) have arrived
	close(events)

	for e := range events {
		fmt.Printf("%s %s attempt=%d err=%v nodes=%d\n", e.Op, e.Key, e.Attempt, e.Err != nil, len(e.Nodes))
	}
	fmt.Println("dropped:", dropped.Load())
	// Output:
	// contended: true
	// acquire invoice:42 attempt=1 err=false nodes=1
	// acquire invoice:42 attempt=1 err=true nodes=1
	// unlock invoice:42 attempt=0 err=false nodes=1
	// dropped: 0
}

// Inspect answers "who holds this lock, and for how long?", and Revoke is
// the operator's forced release.
func ExampleLocker_Inspect() {
	var nodes []redlock.Node
	for range 3 {
		srv, _ := startRedis()
		defer srv.Close()
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	}
	ctx := context.Background()
	app, _ := redlock.New(nodes, &redlock.Options{NodeTimeout: time.Second, Owner: "web-3:pid-812"})
	_ = app.TrustNodes(ctx)
	lease, err := app.TryLock(ctx, "orders:42", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = app.Drain(ctx)

	ops, _ := redlock.New(nodes, &redlock.Options{NodeTimeout: time.Second, Owner: "oncall"})
	in, _ := ops.Inspect(ctx, "orders:42")
	fmt.Println("holder:", in.Owner, "for about 30s:", in.HeldFor > 29*time.Second)
	rev, err := ops.Revoke(ctx, "orders:42")
	fmt.Println("revoked:", len(rev.Holders()), err)
	fmt.Println("holder's extension:", errors.Is(lease.Extend(ctx, 30*time.Second), redlock.ErrNotHeld))
	// Output:
	// holder: web-3:pid-812 for about 30s: true
	// revoked: 1 <nil>
	// holder's extension: true
}

// A transfer locks both accounts in one lease: on each node both keys or
// neither, so two transfers naming them in opposite orders cannot deadlock.
func ExampleLocker_TryLockMulti() {
	var nodes []redlock.Node
	for range 3 {
		srv, _ := startRedis()
		defer srv.Close()
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	}
	locker, _ := redlock.New(nodes, &redlock.Options{NodeTimeout: time.Second, Fencing: true, NoQuarantine: true})
	ctx := context.Background()

	lease, err := locker.TryLockMulti(ctx, []string{"acct:2", "acct:1"}, 10*time.Second)
	if err != nil {
		fmt.Println("not locked:", err)
		return
	}
	fmt.Println("keys:", lease.Keys())
	fmt.Println("a token per key:", lease.TokenOf("acct:1") > 0 && lease.TokenOf("acct:2") > 0)

	// The reverse order names the same lease: contention, not a deadlock.
	_, err = locker.TryLockMulti(ctx, []string{"acct:1", "acct:2"}, 10*time.Second)
	fmt.Println("contended:", errors.Is(err, redlock.ErrNotObtained))
	fmt.Println("unlock:", lease.Unlock(ctx))
	// Output:
	// keys: [acct:1 acct:2]
	// a token per key: true
	// contended: true
	// unlock: <nil>
}

// A job runner acquires and hands the lease to a worker: the handle crosses
// as JSON, and the worker's Locker learns from the nodes how long it has.
func ExampleLocker_Resume() {
	var addrs []string
	for range 3 {
		srv, _ := startRedis()
		defer srv.Close()
		addrs = append(addrs, srv.Addr())
	}
	newLocker := func() *redlock.Locker { // each process has its own clients
		var nodes []redlock.Node
		for _, a := range addrs {
			nodes = append(nodes, redis.NewClient(&redis.Options{Addr: a}))
		}
		l, _ := redlock.New(nodes, &redlock.Options{NodeTimeout: time.Second, NoQuarantine: true})
		return l
	}
	ctx := context.Background()

	// The runner.
	lease, err := newLocker().TryLock(ctx, "job:7", 30*time.Second)
	if err != nil {
		fmt.Println("not locked:", err)
		return
	}
	handle, _ := json.Marshal(lease.Handle())

	// The worker.
	var h redlock.Handle
	_ = json.Unmarshal(handle, &h)
	worker := newLocker()
	resumed, err := worker.Resume(ctx, h)
	if err != nil {
		fmt.Println("not resumed:", err)
		return
	}
	fmt.Println("resumed with validity left:", resumed.Validity() > 25*time.Second)
	fmt.Println("extend:", resumed.Extend(ctx, 30*time.Second))
	fmt.Println("unlock:", resumed.Unlock(ctx))

	// A handle of a released lease is stale.
	_, err = worker.Resume(ctx, h)
	fmt.Println("stale:", errors.Is(err, redlock.ErrNotHeld))
	// Output:
	// resumed with validity left: true
	// extend: <nil>
	// unlock: <nil>
	// stale: true
}

// Lock waits until the lock is free or ctx ends: give it a deadline to
// bound the wait. The error then matches the context's and, where the
// nodes decided the last attempt, ErrNotObtained.
func ExampleLocker_Lock() {
	var nodes []redlock.Node
	for range 3 {
		srv, _ := startRedis()
		defer srv.Close()
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	}
	locker, _ := redlock.New(nodes, &redlock.Options{NodeTimeout: time.Second, NoQuarantine: true})
	ctx := context.Background()

	held, _ := locker.TryLock(ctx, "report:daily", 10*time.Second)
	defer held.Unlock(ctx)

	wait, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := locker.Lock(wait, "report:daily", 10*time.Second)
	fmt.Println("gave up at the deadline:", errors.Is(err, context.DeadlineExceeded))
	fmt.Println("the lock was busy:", errors.Is(err, redlock.ErrNotObtained))
	// Output:
	// gave up at the deadline: true
	// the lock was busy: true
}

// Sentinel-managed nodes: each a primary with replicas, which its client
// follows across failovers. WaitReplicas makes a grant count only once a
// replica has it, so a failover does not lose it.
func ExampleNew_sentinel() {
	sentinels := []string{"sentinel-1.example:26379", "sentinel-2.example:26379", "sentinel-3.example:26379"} // never dialled here: New does not connect
	var nodes []redlock.Node
	for _, name := range []string{"locks-a", "locks-b", "locks-c"} {
		nodes = append(nodes, redis.NewFailoverClient(&redis.FailoverOptions{MasterName: name, SentinelAddrs: sentinels}))
	}
	locker, err := redlock.New(nodes, &redlock.Options{WaitReplicas: 1, NodeTimeout: 200 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = locker // locker.Lock, locker.Do, ... as with plain masters
}

// One Redis Cluster as the only node (N = 1): there is no quorum, so the
// cluster's own failover is the protection, and WaitReplicas matters more.
// A multi-key lease's keys must share a hash slot ({tag}).
func ExampleNew_cluster() {
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"cluster-1.example:7000", "cluster-2.example:7000", "cluster-3.example:7000"}})
	locker, err := redlock.New([]redlock.Node{cluster}, &redlock.Options{Fencing: true, WaitReplicas: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = locker // locker.TryLockMulti(ctx, []string{"{acct}:1", "{acct}:2"}, ttl), ...
}

// startRedis starts an in-process Redis server (miniredis) for an example;
// a deployment's servers are other processes. It is started inside
// crypto/fips140.WithoutEnforcement, whose bypass its goroutines inherit:
// a Redis server names the scripts it caches by their SHA-1, which the
// library never computes, so that the examples run under
// GODEBUG=fips140=only too (see the redlock package's Example_fips140Only).
func startRedis() (*miniredis.Miniredis, error) {
	var srv *miniredis.Miniredis
	var err error
	fips140.WithoutEnforcement(func() { srv, err = miniredis.Run() })
	return srv, err
}
