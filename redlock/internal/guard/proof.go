package guard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// How the node guard knows that the server process answering a node is one
// it examined: the proof of an examination.
//
// A new server process that loaded an RDB snapshot (or an AOF) holds the
// guard's marker as it was, so the marker's GET or PTTL cannot tell it from
// the process that was examined, while it may lack grants made after the
// snapshot. Only the script cache is the process's own: it starts empty and
// is never persisted nor replicated. So every examination runs a copy of
// examine.lua that is this guard's alone, its source ending in a random
// nonce (an examination), and every guarded batch asks SCRIPT EXISTS of
// the copy that last examined the marker successfully. Its SHA1 is cached
// on a process only if that copy ran there.
//
// A copy is sent with EVAL once, when it is new, and adopted as the proof
// only when that run succeeded: EVAL caches a script before it runs it, so
// a failed examination (OOM, an ACL that refuses INFO) leaves its copy
// cached, and that copy must never vouch for anything. A failed run's copy
// is dropped; the next attempt sends a new one. Once adopted, the copy is
// run with EVALSHA only, which caches nothing: where it answers NOSCRIPT,
// the process is new (or its cache was flushed), and a new copy goes with
// EVAL. So a copy's SHA1 is in a process's cache only if an examination
// with it succeeded there (go-redis may resend a command whose reply was
// lost; the resend is the same examination).
//
// Nothing here depends on how the node is reached: a *redis.Client or its
// WithTimeout clone, a Ring, a failover client, a wrapper, a Redis Cluster
// (its masters each get their copy, in the key's slot).
//
// What it costs: one SCRIPT EXISTS in every guarded batch beside the
// marker's PTTL; one cached script of a few KB per Locker and server
// process; and after failed examinations, one per attempt, which backoff
// spaces out (examineBackoff).

// examination is one copy of examine.lua (see above).
type examination struct {
	script     *redis.Script
	existsArgs []any // SCRIPT EXISTS of script: shared, never written
}

func newExamination() *examination {
	var nonce [12]byte
	_, _ = rand.Read(nonce[:]) // never fails (crypto/rand crashes the program instead)
	s := redis.NewScript(examineLua + "\n-- examination " + hex.EncodeToString(nonce[:]) + "\n")
	return &examination{script: s, existsArgs: []any{"script", "exists", s.Hash()}}
}

// examinations keeps, per master address ("" for every node but a Redis
// Cluster), the copy last adopted there, so that a guard's examinations of
// one process share one cached copy; and spaces out attempts after
// failures, each of which leaves one more copy in the node's cache.
type examinations struct {
	mu       sync.Mutex
	adopted  map[string]*examination
	failures int       // in a row
	retryAt  time.Time // no new copy before then, after failures
	lastErr  error
}

// examineBackoff is the wait before a new copy of the examine script goes
// to a node after failures in a row: from 50 ms, doubled each time, up to
// 5 s. The votes fail meanwhile, as the failed examination's did.
func examineBackoff(failures int) time.Duration {
	const first, most = 50 * time.Millisecond, 5 * time.Second
	if failures > 7 {
		return most
	}
	return min(most, first<<(failures-1))
}

// run examines marker on the node through ex: with the copy adopted for
// the marker's master by EVALSHA, else (none, or NOSCRIPT) with a new copy
// by EVAL. It returns the reply and the copy that succeeded.
func (e *examinations) run(ctx context.Context, ex redis.Scripter, marker string, argv ...any) ([]any, *examination, error) {
	addr := masterAddr(ctx, ex, marker)
	e.mu.Lock()
	adopted := e.adopted[addr]
	e.mu.Unlock()
	keys := []string{marker}
	if adopted != nil {
		res, err := adopted.script.EvalSha(ctx, ex, keys, argv...).Slice()
		if !redis.HasErrorPrefix(err, "NOSCRIPT") {
			if err != nil {
				return nil, nil, err
			}
			return res, adopted, nil
		}
	}
	e.mu.Lock()
	if wait := time.Until(e.retryAt); e.failures > 0 && wait > 0 {
		err := e.lastErr
		e.mu.Unlock()
		return nil, nil, &examineDelayedError{wait: wait, last: err}
	}
	e.mu.Unlock()
	fresh := newExamination()
	res, err := fresh.script.Eval(ctx, ex, keys, argv...).Slice()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.failures++
		e.retryAt, e.lastErr = time.Now().Add(examineBackoff(e.failures)), err
		return nil, nil, err
	}
	if e.adopted == nil {
		e.adopted = map[string]*examination{}
	}
	e.adopted[addr], e.failures, e.lastErr = fresh, 0, nil
	return res, fresh, nil
}

// examineDelayedError is an examination not tried, after failures: its
// cause is the last failure's.
type examineDelayedError struct {
	wait time.Duration
	last error
}

func (e *examineDelayedError) Error() string {
	return "after failed examinations, the next in " + e.wait.Round(time.Millisecond).String() + "; the last failed: " + e.last.Error()
}

func (e *examineDelayedError) Unwrap() error { return e.last }

// masterAddr is the address of the master a Redis Cluster node sends
// marker's commands to, and "" for every other node. A wrong answer (a
// stale slot map) costs one more copy, never a wrong proof: a copy proves
// only what ran where it is cached.
func masterAddr(ctx context.Context, ex redis.Scripter, marker string) string {
	cc, ok := ex.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	m, err := cc.MasterForKey(ctx, marker)
	if err != nil {
		return ""
	}
	return m.Options().Addr
}
