// Package luascript runs a Lua script on Redis by its digest without
// computing the digest: a server names it (SCRIPT LOAD), and until one has,
// the script goes with its source (EVAL).
//
// Why: Redis names a cached script by the SHA-1 of its source, and a Go
// program run with GODEBUG=fips140=only (Go's FIPS 140-3 "only" mode) may
// not compute SHA-1: crypto/sha1 panics there, so go-redis's
// redis.NewScript, which hashes the source when it is called, panics at
// the package initialization of any library that wraps its scripts in
// package-level variables. So the client asks each node (SCRIPT LOAD),
// once per script per node for the process's life.
//
// go-redis has redis.NewScriptServerSHA for the same purpose; it is not
// used because it sends SCRIPT LOAD before a script's first EVALSHA
// (two round trips where a node's budget is one), holds every caller
// while it does, and sends it again on every call where an ACL refuses
// SCRIPT LOAD. Here the first calls go as EVAL (one round trip on any
// node), the learning is one SCRIPT LOAD per script per node, in the
// background, and a refusal is tried again only after a backoff.
//
// A digest is trusted only by the node that named it. A node that names
// a script otherwise (a proxy that rewrites scripts, a server that is not
// Redis) would otherwise have every node of the process run, by EVALSHA,
// whatever script that digest names there: another of the library's
// scripts, say, with this one's keys and arguments. So each node keeps
// its own Names, and a script goes to a node by a digest only where that
// node itself named it (in the SCRIPT LOAD that also cached it there);
// elsewhere it goes as EVAL, whose source the node runs as sent. A node
// that names one script two ways is trusted with neither, for the rest of
// the process. (A command shared by several nodes is built with the digest
// most of its own nodes named: see the coordinator's fanOut.)
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

// Script is a Lua script, and a digest trusted for every node where one
// was learned from a server known to be honest (Trust). Its zero value is
// not usable: make one with New.
type Script struct {
	Src     string
	trusted atomic.Pointer[string] // see Trust; nil: none
}

// New returns src as a Script whose digest is not known yet. It computes
// nothing.
func New(src string) *Script { return &Script{Src: src} }

// Digest is the script's trusted digest (Trust), "" where none is: what
// a node that named none is sent the script by. It is an atomic load.
func (s *Script) Digest() string {
	if d := s.trusted.Load(); d != nil {
		return *d
	}
	return ""
}

// Trust makes d the script's digest on every node, whether or not a node
// named it: for a digest learned from a server known to be honest, such as
// a test's own in-process server (TrustFrom). The library never calls it:
// it trusts a node only for itself (Names). A second, different digest is
// refused.
func (s *Script) Trust(d string) error {
	if !ValidDigest(d) {
		return fmt.Errorf("%q is not a digest (40 lower-case hex digits)", d)
	}
	if !s.trusted.CompareAndSwap(nil, &d) && *s.trusted.Load() != d {
		return fmt.Errorf("the script is trusted as %s already, not %s", *s.trusted.Load(), d)
	}
	return nil
}

// TrustFrom loads the script on c (SCRIPT LOAD) and trusts the digest it
// answers for every node (Trust).
func (s *Script) TrustFrom(ctx context.Context, c redis.Scripter) error {
	d, err := c.ScriptLoad(ctx, s.Src).Result()
	if err != nil {
		return err
	}
	return s.Trust(d)
}

// ValidDigest reports whether d reads as a script's digest as Redis and
// Valkey give it: 40 lower-case hexadecimal digits. The client cannot
// check that it is the SHA-1 of the source without computing one; it
// trusts the node that named it for that, on that node only.
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

// Names are the digests one node named for scripts (SCRIPT LOAD), each
// trusted on that node only (see the package comment). The zero value is
// ready to use; a Names must not be copied after first use.
type Names struct {
	m sync.Map // *Script -> *named
}

// named is what one node named for one script, and its learning's state.
type named struct {
	digest atomic.Pointer[string] // nil until the node named it
	// twoWays: the node named the script two ways (Record), and is trusted
	// with neither: the script goes to it as EVAL from then on.
	twoWays atomic.Bool

	mu       sync.Mutex
	learning bool      // a SCRIPT LOAD is in flight
	failures int       // SCRIPT LOADs that failed in a row
	retryAt  time.Time // no SCRIPT LOAD before then, after failures
}

func (n *Names) entry(s *Script) *named {
	if e, ok := n.m.Load(s); ok {
		return e.(*named)
	}
	e, _ := n.m.LoadOrStore(s, new(named))
	return e.(*named)
}

// Of is the digest to send s to this node by: the one the node named, or
// the script's trusted digest (Script.Trust), "" where neither is known,
// or the node named s two ways, and s must go as EVAL. One map load and
// two atomic loads.
func (n *Names) Of(s *Script) string {
	if e, ok := n.m.Load(s); ok {
		e := e.(*named)
		if e.twoWays.Load() {
			return ""
		}
		if d := e.digest.Load(); d != nil {
			return *d
		}
	}
	if d := s.trusted.Load(); d != nil {
		return *d
	}
	return ""
}

// Use is the digest to send s to this node by (Of), and where there is
// none, it starts learning one (LearnSoon) and is "": s goes as EVAL. What
// a transport asks on each use of a script: one map load and an atomic
// load once the node named the digest.
func (n *Names) Use(ctx context.Context, c redis.Scripter, s *Script, timeout time.Duration) string {
	d := n.Of(s)
	if d == "" {
		n.LearnSoon(ctx, c, s, timeout)
	}
	return d
}

// Record keeps d, which this node answered to SCRIPT LOAD of s, as s's
// digest on this node. It refuses a d that is not a digest (ValidDigest),
// and one that differs from what the node named before: a node that names
// one source two ways, or two sources one way, is trusted with neither
// from then on (Of is "", and each goes to it as EVAL, whose source it
// runs as sent), and the error says so.
func (n *Names) Record(s *Script, d string) error {
	if !ValidDigest(d) {
		return fmt.Errorf("the node named the script %q, which is not a digest (40 lower-case hex digits)", d)
	}
	e := n.entry(s)
	if e.twoWays.Load() {
		return fmt.Errorf("the node named the script two ways before, and is trusted with neither: it goes as EVAL")
	}
	if !e.digest.CompareAndSwap(nil, &d) {
		if known := *e.digest.Load(); known != d {
			e.twoWays.Store(true)
			return fmt.Errorf("the node named the script %s, having named it %s before: trusted with neither, it goes as EVAL", d, known)
		}
		return nil
	}
	// One digest for two sources: at least one naming is false, and the
	// node cannot say which (by EVALSHA, one script would run the other),
	// so neither script goes to it by that digest.
	var clash bool
	n.m.Range(func(k, v any) bool {
		if other := v.(*named); other != e && k.(*Script).Src != s.Src {
			if od := other.digest.Load(); od != nil && *od == d {
				other.twoWays.Store(true)
				clash = true
			}
		}
		return true
	})
	if clash {
		e.twoWays.Store(true)
		return fmt.Errorf("the node named the script %s, a digest it named another script by: both are trusted with neither, and go as EVAL", d)
	}
	return nil
}

// Learn asks c, this node's client, to load s (SCRIPT LOAD) and records
// the digest it answers.
func (n *Names) Learn(ctx context.Context, c redis.Scripter, s *Script) error {
	d, err := c.ScriptLoad(ctx, s.Src).Result()
	if err != nil {
		return err
	}
	return n.Record(s, d)
}

// LearnSoon learns s's digest through c, this node's client, in the
// background, within timeout, unless the node named it already, a SCRIPT
// LOAD is in flight, or one failed recently (see learnBackoff). Callers
// call it on every use while Of is ""; once the node named it, this is
// one map load and one atomic load.
//
// The SCRIPT LOAD names no key: it cannot change the order of any
// command on a key, and its reply only decides how the script's next
// uses go. It keeps ctx's values (a hook may read them), not its end:
// it serves the node for the process's life, not the call that started it.
func (n *Names) LearnSoon(ctx context.Context, c redis.Scripter, s *Script, timeout time.Duration) {
	e := n.entry(s)
	if e.digest.Load() != nil || e.twoWays.Load() {
		return
	}
	e.mu.Lock()
	if e.learning || time.Now().Before(e.retryAt) {
		e.mu.Unlock()
		return
	}
	e.learning = true
	e.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		err := n.Learn(ctx, c, s)
		e.mu.Lock()
		defer e.mu.Unlock()
		e.learning = false
		if err != nil && e.digest.Load() == nil {
			e.failures++
			e.retryAt = time.Now().Add(learnBackoff(e.failures))
			return
		}
		e.failures = 0
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

// Run runs s through c, this node's client: by the digest the node named
// (EVALSHA; Of), with its source (EVAL) where the node answers NOSCRIPT
// (a restart, a SCRIPT FLUSH) or named none. It learns nothing: see
// LearnSoon.
func (n *Names) Run(ctx context.Context, c redis.Scripter, s *Script, keys []string, args ...any) *redis.Cmd {
	if d := n.Of(s); d != "" {
		cmd := c.EvalSha(ctx, d, keys, args...)
		// Checked for nil first: HasErrorPrefix allocates even for a nil
		// error, and this is every call's path.
		if cmd.Err() == nil || !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			return cmd
		}
	}
	return c.Eval(ctx, s.Src, keys, args...)
}
