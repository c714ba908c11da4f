package guard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/luascript"
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
// the copy that last examined the marker successfully. Its digest (the
// SHA-1 of its source, which Redis caches it by) is cached on a process
// only if that copy ran there.
//
// A copy is sent with EVAL once, when it is new, and adopted as the proof
// only when that run succeeded: EVAL caches a script before it runs it, so
// a failed examination (OOM, an ACL that refuses INFO) leaves its copy
// cached, and that copy must never vouch for anything. A failed run's copy
// is dropped; the next attempt sends a new one. Once adopted, the copy is
// run with EVALSHA only, which caches nothing: where it answers NOSCRIPT,
// the process is new (or its cache was flushed), and a new copy goes with
// EVAL. So a copy's digest is in a process's cache only if an examination
// with it succeeded there (go-redis may resend a command whose reply was
// lost; the resend is the same examination).
//
// The client never computes the digest (Go's FIPS 140-3 "only" mode
// forbids SHA-1): the copy's EVAL carries its own source as an argument
// too, and the examination returns that argument's SHA-1 (redis.sha1hex)
// with its reply, from the same run on the same process. So the digest is
// known exactly when the copy is adopted, and from nothing else. Why not
// SCRIPT LOAD: after the EVAL, a restart between the two would cache the
// copy on a process it never examined; before it, as LOAD then EVALSHA,
// it costs a second round trip, leaves the copy cached where its run then
// fails just as EVAL does, and needs SCRIPT LOAD in the node's ACL, which
// the guard does not otherwise. The source travels twice in that one EVAL
// (about 14 KB more per new copy); the client checks that the answer reads
// as a digest (40 lower-case hex digits) and trusts the server for the
// rest, as it trusts it to run the script at all.
//
// Nothing here depends on how the node is reached: a *redis.Client or its
// WithTimeout clone, a Ring, a failover client, a wrapper, a Redis Cluster
// (its masters each get their copy, in the key's slot).
//
// What it costs: one SCRIPT EXISTS in every guarded batch beside the
// marker's PTTL; one cached script of a few KB per Locker and server
// process; and after failed examinations, one per attempt, which backoff
// spaces out (examineBackoff).

// examination is one copy of examine.lua (see above): its source, and once
// a run of it succeeded, the digest that run named.
type examination struct {
	src        string
	digest     string
	existsArgs []any // SCRIPT EXISTS of digest: shared, never written
}

func newExamination() *examination {
	var nonce [12]byte
	_, _ = rand.Read(nonce[:]) // never fails (crypto/rand crashes the program instead)
	return &examination{src: examineLua + "\n-- examination " + hex.EncodeToString(nonce[:]) + "\n"}
}

// adopt records digest, which a successful run of the copy named, as its
// own.
func (x *examination) adopt(digest string) error {
	if !luascript.ValidDigest(digest) {
		return fmt.Errorf("redlock: the guard's examine script named its digest %q, which is not one (40 lower-case hex digits)", digest)
	}
	x.digest, x.existsArgs = digest, []any{"script", "exists", digest}
	return nil
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
// by EVAL. It returns the reply (without the digest it ends in) and the
// copy that succeeded.
func (e *examinations) run(ctx context.Context, ex redis.Scripter, marker string, argv ...any) ([]any, *examination, error) {
	addr := masterAddr(ctx, ex, marker)
	e.mu.Lock()
	adopted := e.adopted[addr]
	e.mu.Unlock()
	keys := []string{marker}
	if adopted != nil {
		res, err := ex.EvalSha(ctx, adopted.digest, keys, argv...).Slice()
		if !redis.HasErrorPrefix(err, "NOSCRIPT") {
			if err != nil {
				return nil, nil, err
			}
			return examined(res), adopted, nil
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
	res, err := ex.Eval(ctx, fresh.src, keys, append(argv[:len(argv):len(argv)], fresh.src)...).Slice()
	if err == nil {
		err = fresh.adopt(digestOf(res))
	}
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
	return examined(res), fresh, nil
}

// digestOf is the digest examine.lua's reply names last (its source's,
// where it was sent one), "" where there is none.
func digestOf(res []any) string {
	if len(res) == 0 {
		return ""
	}
	d, _ := res[len(res)-1].(string)
	return d
}

// examined is examine.lua's reply without the digest it ends in: what
// the examination found (see parseExamined).
func examined(res []any) []any {
	if len(res) == 0 {
		return res
	}
	return res[:len(res)-1]
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
