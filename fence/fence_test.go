package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // pure-Go SQLite: a real SQL engine in-process, no cgo, no server

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/fence"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock"
)

func TestRedisGuard(t *testing.T) {
	m := redistest.Miniredis(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	g := fence.NewRedis(c)
	ctx := t.Context()

	require.NoError(t, g.Set(ctx, "balance", "100", 5))
	require.NoError(t, g.Set(ctx, "balance", "110", 5), "the same token writes again")
	require.NoError(t, g.Set(ctx, "balance", "120", 1<<40))
	err := g.Set(ctx, "balance", "stale", 1<<40-1)
	require.ErrorIs(t, err, fence.ErrStaleToken)
	v, _ := m.Get("balance")
	assert.Equal(t, "120", v)
	tok, err := g.Token(ctx, "balance")
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<40), tok)

	// Tokens above 2^53 compare exactly (no Lua doubles).
	require.NoError(t, g.Set(ctx, "big", "a", 1<<60+1))
	require.ErrorIs(t, g.Set(ctx, "big", "b", 1<<60), fence.ErrStaleToken)
	require.NoError(t, g.Set(ctx, "big", "c", 1<<63))

	assert.Error(t, g.Set(ctx, "", "x", 1))
	tok, err = g.Token(ctx, "never-written")
	require.NoError(t, err)
	assert.Zero(t, tok)
}

// Two holders overlap (the older one paused, or a lock granted twice) and
// both increment a counter. With only the write fenced, the older holder's
// write lands first and the newer one's, from the same read, lands after it:
// an increment is lost with both writes accepted (the negative control).
// With the read fenced by Get too, the newer holder's read refuses the older
// holder's write.
func TestRedisGuardedReadModifyWrite(t *testing.T) {
	for _, fencedRead := range []bool{false, true} {
		t.Run(map[bool]string{false: "write fenced only", true: "read fenced too"}[fencedRead], func(t *testing.T) {
			m := redistest.Miniredis(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { c.Close() })
			g := fence.NewRedis(c)
			ctx := t.Context()
			require.NoError(t, g.Set(ctx, "counter", "10", 1))
			read := func(token uint64) int {
				var v string
				var err error
				if fencedRead {
					var ok bool
					v, ok, err = g.Get(ctx, "counter", token)
					require.True(t, ok)
				} else {
					v, err = c.Get(ctx, "counter").Result()
				}
				require.NoError(t, err)
				n, err := strconv.Atoi(v)
				require.NoError(t, err)
				return n
			}
			older, newer := read(5), read(6)
			accepted := 0
			for _, w := range []struct {
				value int
				token uint64
			}{{older + 1, 5}, {newer + 1, 6}} {
				if err := g.Set(ctx, "counter", strconv.Itoa(w.value), w.token); err == nil {
					accepted++
				} else {
					require.ErrorIs(t, err, fence.ErrStaleToken)
				}
			}
			final, _ := m.Get("counter")
			if !fencedRead {
				assert.Equal(t, 2, accepted, "both writes accepted")
				assert.Equal(t, "11", final, "one increment lost")
				return
			}
			assert.Equal(t, 1, accepted, "the older holder's write refused")
			assert.Equal(t, "11", final)
		})
	}
}

func TestRedisGuardGet(t *testing.T) {
	_, g := newRedisGuard(t)
	ctx := t.Context()
	_, ok, err := g.Get(ctx, "missing", 3)
	require.NoError(t, err)
	assert.False(t, ok)
	tok, err := g.Token(ctx, "missing")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), tok, "a read records its token")
	require.ErrorIs(t, g.Set(ctx, "missing", "x", 2), fence.ErrStaleToken, "an older holder cannot write after the read")
	require.NoError(t, g.Set(ctx, "missing", "x", 3))
	v, ok, err := g.Get(ctx, "missing", 3)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "x", v)
	_, _, err = g.Get(ctx, "missing", 2)
	require.ErrorIs(t, err, fence.ErrStaleToken)
	_, _, err = g.Get(ctx, "", 2)
	assert.Error(t, err)
}

func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+t.Name()+"?mode=memory&cache=shared")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	_, err = db.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL, fencing_token INTEGER NOT NULL DEFAULT 0)`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO accounts (id, balance) VALUES ('alice', 100)`)
	require.NoError(t, err)
	return db
}

var accounts = fence.SQL{Table: "accounts", IDColumn: "id", TokenColumn: "fencing_token"}

func TestSQLGuard(t *testing.T) {
	db := openSQLite(t)
	ctx := t.Context()
	balance := func() (b, tok int64) {
		require.NoError(t, db.QueryRow(`SELECT balance, fencing_token FROM accounts WHERE id = 'alice'`).Scan(&b, &tok))
		return b, tok
	}

	require.NoError(t, accounts.Update(ctx, db, "alice", 7, "balance = balance + ?", 10))
	require.NoError(t, accounts.Update(ctx, db, "alice", 7, "balance = balance + ?", 5), "equal token: the same holder")
	err := accounts.Update(ctx, db, "alice", 6, "balance = ?", 0)
	require.ErrorIs(t, err, fence.ErrStaleToken)
	b, tok := balance()
	assert.Equal(t, int64(115), b)
	assert.Equal(t, int64(7), tok)

	err = accounts.Update(ctx, db, "bob", 9, "balance = ?", 1)
	require.ErrorIs(t, err, sql.ErrNoRows)
	assert.NotErrorIs(t, err, fence.ErrStaleToken)

	bad := fence.SQL{Table: "accounts; DROP TABLE accounts", IDColumn: "id", TokenColumn: "t"}
	assert.Error(t, bad.Update(ctx, db, "alice", 9, "balance = 1"))
	assert.Error(t, accounts.Update(ctx, db, "alice", 1<<63, "balance = 1"), "tokens must fit BIGINT")
}

// Update never writes into spare capacity of the caller's args.
func TestSQLGuardLeavesTheCallersArgsAlone(t *testing.T) {
	db := openSQLite(t)
	args := make([]any, 1, 8)
	args[0] = 42
	require.NoError(t, accounts.Update(t.Context(), db, "alice", 3, "balance = ?", args...))
	assert.Equal(t, []any{42, nil, nil, nil}, args[:4], "Update appended to the caller's slice")
}

// MySQL counts rows changed, not matched: a write repeating the row's token
// and values reports none. A trigger gives SQLite the same habit (an update
// that changes nothing is skipped and not counted); the repeated write is the
// same holder's and must succeed, and a lower token must still be stale.
func TestSQLGuardOnADatabaseThatCountsChangedRows(t *testing.T) {
	db := openSQLite(t)
	_, err := db.Exec(`CREATE TRIGGER changed_rows_only BEFORE UPDATE ON accounts
		WHEN NEW.balance = OLD.balance AND NEW.fencing_token = OLD.fencing_token
		BEGIN SELECT RAISE(IGNORE); END`)
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, accounts.Update(ctx, db, "alice", 7, "balance = ?", 50))
	res, err := db.Exec(`UPDATE accounts SET balance = 50, fencing_token = 7 WHERE id = 'alice'`)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.Zero(t, n, "the trigger makes an unchanged row count as not affected")

	require.NoError(t, accounts.Update(ctx, db, "alice", 7, "balance = ?", 50), "the same write again, by the same holder")
	require.ErrorIs(t, accounts.Update(ctx, db, "alice", 6, "balance = ?", 50), fence.ErrStaleToken)
	require.ErrorIs(t, accounts.Update(ctx, db, "bob", 7, "balance = ?", 50), sql.ErrNoRows)
}

// The Kleppmann scenario: A acquires, is paused past its lease, B acquires
// with a higher token and writes; A resumes and writes; the guard rejects A.
func TestPausedHolderIsFencedOff(t *testing.T) {
	ctx := t.Context()
	var servers []*miniredis.Miniredis
	var nodes []redlock.Node
	for range 5 {
		m := redistest.Miniredis(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		servers, nodes = append(servers, m), append(nodes, c)
	}
	clockA := clock.NewFake(time.Unix(0, 0))
	// Not a test of timing: a NodeTimeout for cold connections on a loaded,
	// race-instrumented machine, not the 50ms default.
	a, err := redlock.New(nodes, &redlock.Options{Fencing: true, Clock: clockA, NodeTimeout: 5 * time.Second})
	require.NoError(t, err)
	b, err := redlock.New(nodes, &redlock.Options{Fencing: true, NodeTimeout: 5 * time.Second})
	require.NoError(t, err)
	require.NoError(t, b.TrustNodes(t.Context())) // new servers, no locks
	storage := redistest.Miniredis(t)
	sc := redis.NewClient(&redis.Options{Addr: storage.Addr()})
	t.Cleanup(func() { sc.Close() })
	guard := fence.NewRedis(sc)
	db := openSQLite(t)

	leaseA, err := a.TryLock(ctx, "file", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, a.Drain(ctx))

	// A stops (a GC pause) for 15 s; the lock expires on the nodes.
	clockA.Advance(15 * time.Second)
	for _, m := range servers {
		m.FastForward(15 * time.Second)
	}
	leaseB, err := b.TryLock(ctx, "file", 10*time.Second)
	require.NoError(t, err)
	require.Greater(t, leaseB.Token(), leaseA.Token())
	require.NoError(t, guard.Set(ctx, "file", "written by B", leaseB.Token()))
	require.NoError(t, accounts.Update(ctx, db, "alice", leaseB.Token(), "balance = ?", 1))

	// A wakes up, unaware, and writes.
	assert.ErrorIs(t, guard.Set(ctx, "file", "written by A", leaseA.Token()), fence.ErrStaleToken)
	assert.ErrorIs(t, accounts.Update(ctx, db, "alice", leaseA.Token(), "balance = ?", 2), fence.ErrStaleToken)
	v, _ := storage.Get("file")
	assert.Equal(t, "written by B", v)
	require.NoError(t, leaseB.Unlock(ctx))
	require.NoError(t, errors.Join(a.Drain(ctx), b.Drain(context.Background())))
}

// Token 0 is what a lease without fencing carries: every holder's, so the
// guard would accept both holders' writes. It is refused, everywhere.
func TestGuardsRefuseTokenZero(t *testing.T) {
	m, g := newRedisGuard(t)
	ctx := t.Context()
	require.ErrorIs(t, g.Set(ctx, "k", "v", 0), fence.ErrNoToken)
	_, _, err := g.Get(ctx, "k", 0)
	require.ErrorIs(t, err, fence.ErrNoToken)
	assert.False(t, m.Exists("k"))
	db := openSQLite(t)
	accounts := fence.SQL{Table: "accounts", IDColumn: "id", TokenColumn: "fencing_token"}
	require.ErrorIs(t, accounts.Update(ctx, db, "alice", 0, "balance = ?", 1), fence.ErrNoToken)
}

// A key named like a token record would replace another key's record: an
// older holder of "a" would then write after a newer holder's read.
func TestRedisGuardRefusesTokenRecordNames(t *testing.T) {
	_, g := newRedisGuard(t)
	ctx := t.Context()
	_, _, err := g.Get(ctx, "a", 9)
	require.NoError(t, err)
	require.ErrorContains(t, g.Set(ctx, "{a}:fence-token", "0", 1), "token record")
	_, _, err = g.Get(ctx, "{a}:fence-token", 1)
	require.ErrorContains(t, err, "token record")
	require.ErrorIs(t, g.Set(ctx, "a", "stale", 1), fence.ErrStaleToken, "holder 1 is older than holder 9, who read a")
	require.NoError(t, g.Set(ctx, "{b}:fence-tokens", "x", 1), "only the exact suffix is reserved")
}

// A read that fails (the key holds another type) records nothing.
func TestRedisGuardFailedGetRecordsNothing(t *testing.T) {
	m, g := newRedisGuard(t)
	ctx := t.Context()
	_, err := m.Lpush("list", "x")
	require.NoError(t, err)
	_, _, err = g.Get(ctx, "list", 7)
	require.Error(t, err)
	require.NotErrorIs(t, err, fence.ErrStaleToken)
	tok, err := g.Token(ctx, "list")
	require.NoError(t, err)
	assert.Zero(t, tok)
}

// newRedisGuard returns an in-process Redis and a guard writing to it.
func newRedisGuard(t *testing.T) (*miniredis.Miniredis, *fence.Redis) {
	t.Helper()
	m := redistest.Miniredis(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	return m, fence.NewRedis(c)
}
