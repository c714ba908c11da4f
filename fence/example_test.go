package fence_test

import (
	"context"
	"crypto/fips140"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/fence"
	"github.com/redlock/redlock/redlock"
)

// A payment must happen at most once, even if two workers pick up the same
// request. The lock keeps them from working on it at the same time; the
// unique request id decides: a second attempt finds it taken and does
// nothing. (The lock alone could not: a paused worker could wake after its
// lease and pay again.)
func Example_idempotentPayment() {
	ctx := context.Background()
	var nodes []redlock.Node
	for range 3 {
		srv, _ := startRedis()
		defer srv.Close()
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	}
	locker, _ := redlock.New(nodes, &redlock.Options{Fencing: true, NodeTimeout: time.Second}) // in-process servers on a busy machine
	_ = locker.TrustNodes(ctx)                                                                 // new servers: they hold no locks
	db, _ := sql.Open("sqlite", "file:payments?mode=memory&cache=shared")
	defer db.Close()
	db.Exec(`CREATE TABLE payments (request_id TEXT PRIMARY KEY, amount INTEGER, fencing_token INTEGER)`)

	pay := func(worker, requestID string, amount int) {
		err := locker.Do(ctx, "payment:"+requestID, 5*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
			_, err := db.ExecContext(ctx, `INSERT INTO payments (request_id, amount, fencing_token) VALUES (?, ?, ?)`,
				requestID, amount, int64(lease.Token()))
			return err
		})
		switch {
		case err == nil:
			fmt.Println(worker + ": paid")
		case strings.Contains(err.Error(), "UNIQUE constraint failed"):
			fmt.Println(worker + ": already paid, nothing to do")
		default:
			fmt.Println(worker+":", err)
		}
	}
	pay("worker 1", "req-7", 250)
	pay("worker 2", "req-7", 250) // the same request, delivered twice

	var n int
	db.QueryRow(`SELECT COUNT(*) FROM payments`).Scan(&n)
	fmt.Println("payments:", n)
	// Output:
	// worker 1: paid
	// worker 2: already paid, nothing to do
	// payments: 1
}

// Do with a fenced SQL write: the row keeps the token of the last write it
// accepted, and a write carrying an older token (a holder paused past its
// lease, overtaken by a newer one) changes nothing and returns
// ErrStaleToken.
func ExampleSQL_Update() {
	ctx := context.Background()
	var nodes []redlock.Node
	for range 3 {
		srv, _ := startRedis()
		defer srv.Close()
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	}
	locker, _ := redlock.New(nodes, &redlock.Options{Fencing: true, NodeTimeout: time.Second})
	_ = locker.TrustNodes(ctx) // new servers: they hold no locks
	db, _ := sql.Open("sqlite", "file:accounts?mode=memory&cache=shared")
	defer db.Close()
	db.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER, fencing_token INTEGER NOT NULL DEFAULT 0)`)
	db.Exec(`INSERT INTO accounts (id, balance) VALUES ('alice', 100)`)
	accounts := fence.SQL{Table: "accounts", IDColumn: "id", TokenColumn: "fencing_token"}

	var paused uint64 // the first holder's token, kept to show a late write
	for range 2 {
		err := locker.Do(ctx, "account:alice", 5*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
			if paused == 0 {
				paused = lease.Token()
			}
			return accounts.Update(ctx, db, "alice", lease.Token(), "balance = balance - ?", 25)
		})
		fmt.Println("debit:", err)
	}
	// The first holder wakes from a pause and writes with its old token.
	err := accounts.Update(ctx, db, "alice", paused, "balance = balance - ?", 25)
	fmt.Println("late write refused:", errors.Is(err, fence.ErrStaleToken))

	var balance int
	db.QueryRow(`SELECT balance FROM accounts WHERE id = 'alice'`).Scan(&balance)
	fmt.Println("balance:", balance)
	// Output:
	// debit: <nil>
	// debit: <nil>
	// late write refused: true
	// balance: 50
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
