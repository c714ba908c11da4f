package redlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock"
)

// A program that may use only FIPS 140-3 approved cryptography runs in
// Go's FIPS 140-3 "only" mode, where anything else (SHA-1, MD5) panics or
// fails. A main package opts in with a directive above its package
// clause:
//
//	//go:debug fips140=only
//	package main
//
// (or a `godebug fips140=only` line in its go.mod), and any Go program can
// be run so with GODEBUG=fips140=only in its environment;
// crypto/fips140.Enforced reports whether the mode is on.
//
// The library works there unchanged. Redis names cached scripts by the
// SHA-1 of their source, which the client must not compute, so the
// library learns each script's digest from each node instead: Warm
// records what SCRIPT LOAD answers on every node, so that scripts go by
// digest (EVALSHA) from the first lock; without Warm, a script's first use
// on a node goes with its source (EVAL) and one SCRIPT LOAD per script and
// node, in the background, learns the digest that node names. A node that
// refuses SCRIPT LOAD still works: its scripts keep going as EVAL.
//
// This example runs in either mode (the library's tests run it under
// GODEBUG=fips140=only too). Its in-process servers compute their SHA-1
// inside crypto/fips140.WithoutEnforcement (see startRedis), as a Redis
// server, another process, does on its own.
func Example_fips140Only() {
	var nodes []redlock.Node
	for range 3 {
		srv, _ := startRedis()
		defer srv.Close()
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	}
	locker, err := redlock.New(nodes, &redlock.Options{NodeTimeout: time.Second}) // in-process servers on a busy machine
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	_ = locker.TrustNodes(ctx)             // new servers: they hold no locks
	fmt.Println("warm:", locker.Warm(ctx)) // the scripts' digests, as the nodes name them
	lease, err := locker.TryLock(ctx, "report", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("locked; released:", lease.Unlock(ctx))
	// Output:
	// warm: <nil>
	// locked; released: <nil>
}
