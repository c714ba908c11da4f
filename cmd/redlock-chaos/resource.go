package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // pure-Go SQLite: a real SQL engine in-process, no cgo, no server

	"github.com/redlock/redlock/fence"
)

// A resource holds the clients' counters, one per lock name, and is where
// the referee looks for stale writes. Two kinds sit side by side (-resource
// both, the default): a Redis server guarded by fence.Redis, and a SQL table
// guarded by fence.SQL; even keys live on the first, odd keys on the
// second. In the unsafe configuration both are read and written plainly.
type resource interface {
	// read returns the key's counter. Fenced, it first records the token,
	// so that no older holder writes after it (a read-modify-write needs
	// that: see docs/failure-models.md, "Found by the first runs").
	read(ctx context.Context, key int, token uint64) (int64, error)
	write(ctx context.Context, key int, value int64, token uint64) error
	// final reads the counter after the run, unfenced.
	final(ctx context.Context, key int) (int64, error)
}

// resources picks each key's resource.
type resources struct {
	kind  string // "both", "redis" or "sql"
	redis *redisResource
	sql   *sqlResource
}

func (r *resources) of(key int) resource {
	if r.kind == "sql" || (r.kind == "both" && key%2 == 1) {
		return r.sql
	}
	return r.redis
}

// describe says where each key lives, for the report.
func (r *resources) describe() string {
	switch r.kind {
	case "redis":
		return "a Redis server (fence.Redis)"
	case "sql":
		return "a SQLite table (fence.SQL)"
	}
	return "a Redis server (fence.Redis) for even keys, a SQLite table (fence.SQL) for odd keys"
}

// redisResource is a counter per key on a Redis server.
type redisResource struct {
	client *redis.Client
	guard  *fence.Redis // nil: unsafe
}

func (r *redisResource) read(ctx context.Context, key int, token uint64) (int64, error) {
	var s string
	var err error
	if r.guard != nil {
		var ok bool
		s, ok, err = r.guard.Get(ctx, counterName(key), token)
		if err == nil && !ok {
			return 0, nil
		}
	} else {
		s, err = r.client.Get(ctx, counterName(key)).Result()
		if errors.Is(err, redis.Nil) {
			return 0, nil
		}
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("counter %d holds %q", key, s)
	}
	return n, nil
}

func (r *redisResource) write(ctx context.Context, key int, value int64, token uint64) error {
	if r.guard != nil {
		return r.guard.Set(ctx, counterName(key), value, token)
	}
	return r.client.Set(ctx, counterName(key), value, 0).Err()
}

func (r *redisResource) final(ctx context.Context, key int) (int64, error) {
	v, err := r.client.Get(ctx, counterName(key)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}

// sqlResource is a row per key in a SQLite table that keeps each row's
// fencing token beside its counter.
type sqlResource struct {
	db    *sql.DB
	guard *fence.SQL // nil: unsafe
}

// openSQL creates the table, a row per key, in a database file in dir.
func openSQL(ctx context.Context, dir string, keys int, safe bool) (*sqlResource, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "resource.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // one writer at a time, as SQLite has it, without SQLITE_BUSY
	if _, err := db.ExecContext(ctx, `CREATE TABLE counters (id INTEGER PRIMARY KEY, value INTEGER NOT NULL, fence_token INTEGER NOT NULL)`); err != nil {
		db.Close()
		return nil, err
	}
	for k := range keys {
		if _, err := db.ExecContext(ctx, `INSERT INTO counters VALUES (?, 0, 0)`, k); err != nil {
			db.Close()
			return nil, err
		}
	}
	r := &sqlResource{db: db}
	if safe {
		r.guard = &fence.SQL{Table: "counters", IDColumn: "id", TokenColumn: "fence_token"}
	}
	return r, nil
}

func (r *sqlResource) read(ctx context.Context, key int, token uint64) (int64, error) {
	if r.guard == nil {
		return r.final(ctx, key)
	}
	// A fenced read: record the token (a write of nothing, refused if a
	// newer holder came first) and read, in one transaction.
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if err := r.guard.Update(ctx, tx, key, token, "value = value"); err != nil {
		return 0, err
	}
	var v int64
	if err := tx.QueryRowContext(ctx, `SELECT value FROM counters WHERE id = ?`, key).Scan(&v); err != nil {
		return 0, err
	}
	return v, tx.Commit()
}

func (r *sqlResource) write(ctx context.Context, key int, value int64, token uint64) error {
	if r.guard != nil {
		return r.guard.Update(ctx, r.db, key, token, "value = ?", value)
	}
	_, err := r.db.ExecContext(ctx, `UPDATE counters SET value = ? WHERE id = ?`, value, key)
	return err
}

func (r *sqlResource) final(ctx context.Context, key int) (int64, error) {
	var v int64
	err := r.db.QueryRowContext(ctx, `SELECT value FROM counters WHERE id = ?`, key).Scan(&v)
	return v, err
}
