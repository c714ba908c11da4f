// Package fence is the resource side of fencing tokens: writes that a
// resource accepts only when they carry a token at least as high as any it
// has accepted before, so that a lock holder that was paused past its lease
// (and has been overtaken by a newer holder) cannot write any more.
//
// Tokens come from redlock.Lease.Token with redlock.Options.Fencing. Equal
// tokens are accepted: a token is issued to one acquisition only, so an equal
// token is the same holder writing again, which must succeed (a retried or
// multi-step write). Lower tokens are rejected with ErrStaleToken.
//
// A read-modify-write must fence its read as well (Redis.Get): a guard that
// sees only writes accepts two writes computed from the same read when the
// older holder writes first.
//
// A lock with fencing reduces conflicts; the guard decides. For operations
// that must happen at most once (a payment), also give each request a unique
// id and let a unique constraint have the last word: see the package example.
package fence

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/hashtag"
	"github.com/redlock/redlock/internal/luascript"
)

// ErrStaleToken means the resource has already accepted a higher token: the
// writer's lease was superseded, and the write was not applied.
var ErrStaleToken = errors.New("fence: stale fencing token")

// ErrNoToken is the error for token 0, which no acquisition issues: it is
// what redlock.Lease.Token returns without redlock.Options.Fencing. Every
// holder would carry the same token, and equal tokens are accepted, so the
// guard would guard nothing.
var ErrNoToken = errors.New("fence: token 0: the lease has no fencing token (set redlock.Options.Fencing)")

// tokenRecordSuffix ends the name of every key that keeps a token record.
const tokenRecordSuffix = ":fence-token"

// The guard's scripts. They go by the digest a server named (EVALSHA),
// as EVAL until one has: the first use loads them in the background
// (SCRIPT LOAD), once per Redis guard. The client computes no SHA-1, so that
// the package works in Go's FIPS 140-3 "only" mode (GODEBUG=fips140=only),
// where go-redis's redis.NewScript panics (see internal/luascript).
var (
	//go:embed set.lua
	setLua    string
	setScript = luascript.New(setLua)
	//go:embed get.lua
	getLua    string
	getScript = luascript.New(getLua)
)

// learnTimeout bounds the SCRIPT LOAD that learns a script's digest, which
// no call waits for.
const learnTimeout = 10 * time.Second

// run runs s on keys with args through the guard's client.
func (g *Redis) run(ctx context.Context, s *luascript.Script, keys []string, args ...any) *redis.Cmd {
	g.names.Use(ctx, g.client, s, learnTimeout) // learns the digest where the node named none
	return g.names.Run(ctx, g.client, s, keys, args...)
}

// Redis guards values stored in Redis: each key keeps, beside it (same hash
// slot), the highest token accepted for it.
type Redis struct {
	client redis.Scripter
	names  *luascript.Names // the digests client's server named (shared by copies of the Redis)
}

// NewRedis returns a guard that writes through client. Make one per client
// and keep it: it learns its scripts' digests from client's server once
// (until then they go as EVAL, with their source).
func NewRedis(client redis.Scripter) *Redis {
	return &Redis{client: client, names: new(luascript.Names)}
}

// Set stores value at key if token is at least the highest token accepted
// for key, atomically with recording token; otherwise it returns
// ErrStaleToken and changes nothing. Token 0 is refused (ErrNoToken).
func (g *Redis) Set(ctx context.Context, key string, value any, token uint64) error {
	if token == 0 {
		return ErrNoToken
	}
	tk, err := tokenKey(key)
	if err != nil {
		return err
	}
	ok, err := g.run(ctx, setScript, []string{key, tk}, value, pad(token)).Int64()
	if err != nil {
		return fmt.Errorf("fence: set %q: %w", key, err)
	}
	if ok != 1 {
		return fmt.Errorf("fence: set %q with token %d: %w", key, token, ErrStaleToken)
	}
	return nil
}

// Get reads key for the holder of token, for a read-modify-write: a write
// fenced by Set alone still loses updates when two holders overlap (both
// read 10, the older writes 11 first, the newer writes 11 too, with a higher
// token, and is accepted). Get records token as accepted for key, so that
// every holder older than this reader is refused from then on, by Set and by
// Get; it returns ErrStaleToken, and reads nothing, if a higher token was
// accepted already. ok is false when key has no value. Token 0 is refused
// (ErrNoToken).
func (g *Redis) Get(ctx context.Context, key string, token uint64) (value string, ok bool, err error) {
	if token == 0 {
		return "", false, ErrNoToken
	}
	tk, err := tokenKey(key)
	if err != nil {
		return "", false, err
	}
	reply, err := g.run(ctx, getScript, []string{key, tk}, pad(token)).Slice()
	if err != nil {
		return "", false, fmt.Errorf("fence: get %q: %w", key, err)
	}
	if len(reply) == 0 || reply[0] != int64(1) {
		return "", false, fmt.Errorf("fence: get %q with token %d: %w", key, token, ErrStaleToken)
	}
	if len(reply) < 2 {
		return "", false, nil
	}
	value, ok = reply[1].(string)
	if !ok {
		return "", false, fmt.Errorf("fence: get %q: unexpected reply %v", key, reply)
	}
	return value, true, nil
}

// Token returns the highest token accepted for key, 0 if none.
func (g *Redis) Token(ctx context.Context, key string) (uint64, error) {
	tk, err := tokenKey(key)
	if err != nil {
		return 0, err
	}
	s, err := g.client.EvalRO(ctx, `return redis.call("GET", KEYS[1])`, []string{tk}).Text()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fence: token of %q: %w", key, err)
	}
	return strconv.ParseUint(s, 10, 64)
}

// tokenKey names the record of key's tokens, in key's hash slot. Keys whose
// names end like a record's are refused: a write to one would replace
// another key's record. Note that "a" and "{a}" share one record (both are
// in slot a and name it "{a}:fence-token"): a token accepted for one is
// accepted for both, which is stricter than needed, never looser.
func tokenKey(key string) (string, error) {
	if key == "" {
		return "", errors.New("fence: empty key")
	}
	if strings.HasSuffix(key, tokenRecordSuffix) {
		return "", fmt.Errorf("fence: %q is named like a token record (%s): not a key the guard can write", key, tokenRecordSuffix)
	}
	k, err := hashtag.Beside(key, tokenRecordSuffix)
	if err != nil {
		return "", fmt.Errorf("fence: %w", err)
	}
	return k, nil
}

func pad(token uint64) string { return fmt.Sprintf("%020d", token) }

// Execer is what SQL.Update needs: *sql.DB, *sql.Tx and *sql.Conn have it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQL guards rows of a table that keeps, in TokenColumn, the token of the
// last write accepted for each row. Names are identifiers of the schema, not
// user input; Update refuses anything but plain (optionally dotted) names.
type SQL struct {
	Table       string
	IDColumn    string
	TokenColumn string
	// Dollar selects $1-style placeholders (PostgreSQL) instead of ?.
	Dollar bool
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// Update runs, as one statement,
//
//	UPDATE Table SET <set>, TokenColumn = token WHERE IDColumn = id AND TokenColumn <= token
//
// where set is an assignment list with its own placeholders and args their
// values (args is not modified). It returns nil if the row was written,
// ErrStaleToken if the row holds a higher token, sql.ErrNoRows if no row
// has that id, and ErrNoToken for token 0.
//
// MySQL reports the rows an UPDATE changed, not those it matched (unless
// the connection sets CLIENT_FOUND_ROWS), so a write that repeats the row's
// current token and values reports no rows. Update then finds the row
// holding exactly this token, which means the same holder's write is the
// last one accepted and the row already holds what it writes: it returns
// nil, on every database.
func (s SQL) Update(ctx context.Context, db Execer, id any, token uint64, set string, args ...any) error {
	for _, name := range []string{s.Table, s.IDColumn, s.TokenColumn} {
		if !identifier.MatchString(name) {
			return fmt.Errorf("fence: %q is not a plain SQL identifier", name)
		}
	}
	if token == 0 {
		return ErrNoToken
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("fence: token %d does not fit a signed 64-bit column", token)
	}
	t := int64(token)
	n := len(args)
	ph := func(i int) string { // the i-th placeholder, 1-based
		if s.Dollar {
			return "$" + strconv.Itoa(i)
		}
		return "?"
	}
	query := fmt.Sprintf("UPDATE %s SET %s, %s = %s WHERE %s = %s AND %s <= %s",
		s.Table, set, s.TokenColumn, ph(n+1), s.IDColumn, ph(n+2), s.TokenColumn, ph(n+3))
	all := make([]any, 0, len(args)+3) // never into spare capacity of the caller's args
	all = append(append(all, args...), t, id, t)
	res, err := db.ExecContext(ctx, query, all...)
	if err != nil {
		return fmt.Errorf("fence: update %s: %w", s.Table, err)
	}
	rows, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: update %s: %w", s.Table, err)
	}
	if rows > 0 {
		return nil
	}
	// Nothing changed: a higher token, or no such row?
	var current int64
	err = db.QueryRowContext(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s = %s", s.TokenColumn, s.Table, s.IDColumn, ph(1)), id).Scan(&current)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("fence: update %s: no row with %s = %v: %w", s.Table, s.IDColumn, id, sql.ErrNoRows)
	case err != nil:
		return fmt.Errorf("fence: update %s: %w", s.Table, err)
	case current == t:
		return nil // matched, nothing to change (MySQL's rows "changed")
	}
	return fmt.Errorf("fence: update %s %v with token %d, row has %d: %w", s.Table, id, token, current, ErrStaleToken)
}
