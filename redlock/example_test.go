package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock"
)

func Example() {
	// Three independent Redis masters; in-process servers stand in for them here.
	var nodes []redlock.Node
	for range 3 {
		srv, _ := miniredis.Run()
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
	// These servers are new and hold no locks: say so, or the node guard
	// keeps each out of the quorum until MaxTTL after its memory began.
	if err := locker.TrustNodes(ctx); err != nil {
		fmt.Println(err)
	}
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
	// held for about 10s: true
	// contended: true
	// extend: <nil>
}

// Warm reports, per node, what keeps a node from being ready.
func ExampleLocker_Warm() {
	up, _ := miniredis.Run()
	defer up.Close()
	down, _ := miniredis.Run()
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
