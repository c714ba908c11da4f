// Package luascript runs a Lua script on Redis by its digest without
// computing the digest: a server names it (SCRIPT LOAD), and until one has,
// the script goes with its source (EVAL).
//
// Why: Redis names a cached script by the SHA-1 of its source, and a Go
// program run with GODEBUG=fips140=only (Go's FIPS 140-3 "only" mode) may
// not compute SHA-1: crypto/sha1 panics there, so go-redis's
// redis.NewScript, which hashes the source when it is called, panics at
// the package initialization of any library that wraps its scripts in
// package-level variables. The digest is a property of the source, the
// same on every server: learned once from one server, it serves every
// node for the rest of the process.
//
// go-redis has redis.NewScriptServerSHA for the same purpose; it is not
// used because it sends SCRIPT LOAD before a script's first EVALSHA
// (two round trips where a node's budget is one), holds every caller
// while it does, and sends it again on every call where an ACL refuses
// SCRIPT LOAD. Here the first calls go as EVAL (one round trip on any
// node), the learning is one SCRIPT LOAD per script per process, and a
// refusal is tried again only after a backoff.
//
// It is for the library's own scripts (the coordinator's transport, the
// fence package, the benchmark CLI's floor); it knows nothing of locks.
package luascript

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script and the digest a server gave for it, once one
// has. Its zero value is not usable: make one with New.
type Script struct {
	Src    string
	digest atomic.Pointer[string] // nil until a server named it

	mu       sync.Mutex
	learning bool      // a SCRIPT LOAD is in flight
	failures int       // SCRIPT LOADs that failed in a row
	retryAt  time.Time // no SCRIPT LOAD before then, after failures
}

// New returns src as a Script whose digest is not known yet. It computes
// nothing.
func New(src string) *Script { return &Script{Src: src} }

// Digest is the digest a server gave for the script, "" until one has.
// It is an atomic load: the steady state costs nothing more.
func (s *Script) Digest() string {
	if d := s.digest.Load(); d != nil {
		return *d
	}
	return ""
}

// ValidDigest reports whether d reads as a script's digest as Redis and
// Valkey give it: 40 lower-case hexadecimal digits. The client cannot
// check that it is the SHA-1 of the source without computing one; it
// trusts the server for that, as it trusts it to run the script.
func ValidDigest(d string) bool {
	if len(d) != 40 {
		return false
	}
	for i := range len(d) {
		if c := d[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Record keeps d, which a server answered to SCRIPT LOAD of the script,
// as its digest. It refuses a d that is not a digest (ValidDigest), and
// one that differs from the digest already known: every server names one
// source alike, so two names mean that one of them is not the script's
// (a proxy that rewrites, a server that is not Redis). The first digest
// known stays.
func (s *Script) Record(d string) error {
	if !ValidDigest(d) {
		return fmt.Errorf("the node named the script %q, which is not a digest (40 lower-case hex digits)", d)
	}
	if !s.digest.CompareAndSwap(nil, &d) {
		if known := s.Digest(); known != d {
			return fmt.Errorf("the node named the script %s, another node %s", d, known)
		}
	}
	return nil
}

// Learn asks c to load the script (SCRIPT LOAD) and records the digest it
// answers.
func (s *Script) Learn(ctx context.Context, c redis.Scripter) error {
	d, err := c.ScriptLoad(ctx, s.Src).Result()
	if err != nil {
		return err
	}
	return s.Record(d)
}

// LearnSoon learns the digest through c in the background, within
// timeout, unless it is known already, a SCRIPT LOAD is in flight, or
// one failed recently (see learnBackoff). Callers call it on every use
// while Digest is ""; once it is known this is one atomic load.
//
// The SCRIPT LOAD names no key: it cannot change the order of any
// command on a key, and its reply only decides how the script's next
// uses go. It keeps ctx's values (a hook may read them), not its end:
// it serves the process, not the call that started it.
func (s *Script) LearnSoon(ctx context.Context, c redis.Scripter, timeout time.Duration) {
	if s.digest.Load() != nil {
		return
	}
	s.mu.Lock()
	if s.learning || time.Now().Before(s.retryAt) {
		s.mu.Unlock()
		return
	}
	s.learning = true
	s.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		err := s.Learn(ctx, c)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.learning = false
		if err != nil && s.digest.Load() == nil {
			s.failures++
			s.retryAt = time.Now().Add(learnBackoff(s.failures))
			return
		}
		s.failures = 0
	}()
}

// learnBackoff is the wait before SCRIPT LOAD is tried again after
// failures in a row: from a second, doubled each time, up to ten
// minutes. Why so long at the end: a failure that repeats is nearly
// always an ACL that refuses SCRIPT LOAD, and meanwhile the script only
// goes as EVAL, which costs bytes, never a wrong answer.
func learnBackoff(failures int) time.Duration {
	const first, most = time.Second, 10 * time.Minute
	if failures > 10 {
		return most
	}
	return min(most, first<<(failures-1))
}

// Run runs the script through c: by its digest (EVALSHA) once known, and
// with its source (EVAL) where the server answers NOSCRIPT (a restart, a
// SCRIPT FLUSH) or while the digest is unknown. It learns nothing: see
// LearnSoon.
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	if d := s.Digest(); d != "" {
		cmd := c.EvalSha(ctx, d, keys, args...)
		// err == nil first: HasErrorPrefix allocates even for a nil error,
		// and this is every call's path.
		if err := cmd.Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
			return cmd
		}
	}
	return c.Eval(ctx, s.Src, keys, args...)
}
