package redlock

import (
	"context"
	"fmt"
	"weak"

	"github.com/redlock/redlock/redlock/internal/wire"
)

// Waiting is how many Lock calls of l wait for key in its queue (package waitq),
// for the tests of waiting.
func Waiting(l *Locker, key string) int { return l.turns.Waiting(key) }

// Listening is how many nodes confirmed l's subscription to key's release
// notices.
func Listening(l *Locker, key string) int { return l.notices.Confirmed(key) }

// Subscribers is how many subscriber connections l has open.
func Subscribers(l *Locker) int { return l.notices.Connections() }

// ID is l's id in keys' lines.
func ID(l *Locker) string { return l.id }

// Reseal gives h the seal of its fields as they stand: for tests of what
// Resume checks beyond the seal (a token above the counters).
func Reseal(h Handle) Handle {
	h.Seal = h.seal()
	return h
}

// scripts are every script the coordinator sends (Warm loads some of them:
// warmScripts).
var scripts = []*wire.Script{acquireScript, releaseScript, joinScript, extendScript, revokeScript, inspectScript,
	checkScript, fenceScript, recordScript, resumeScript}

// LearnScripts trusts, for every node, the digest n names for every script
// the coordinator sends (SCRIPT LOAD; luascript.Script.Trust): n must be
// the tests' own server. Every node then gets the scripts by digest from
// their first use (EVALSHA, EVAL after NOSCRIPT), as before the client
// stopped computing digests, whatever tests ran before.
func LearnScripts(ctx context.Context, n Node) error {
	for _, s := range scripts {
		if err := s.TrustFrom(ctx, n); err != nil {
			return fmt.Errorf("SCRIPT LOAD of the %s script: %w", s.Name, err)
		}
	}
	return nil
}

// ScriptDigests is every script's digest trusted for every node
// (LearnScripts), "" where none is, by name.
func ScriptDigests() map[string]string {
	d := make(map[string]string, len(scripts))
	for _, s := range scripts {
		d[s.Name] = s.Digest()
	}
	return d
}

// NodeDigests is the digest each of l's nodes named for the script of that
// name ("" where it named none): what its transport sends it by.
func NodeDigests(l *Locker, name string) []string {
	var s *wire.Script
	for _, c := range scripts {
		if c.Name == name {
			s = c
		}
	}
	d := make([]string, len(l.nodes))
	for i, n := range l.nodes {
		d[i] = n.link.Names().Of(s.Script)
	}
	return d
}

// DialKey is the weak key of n's dial record (see dialKey): it does not
// keep n alive.
func DialKey(n Node) weak.Pointer[byte] {
	key, _, _ := dialKey(n)
	return key
}

// DialRecorded reports whether the client of key has a dial record.
func DialRecorded(key weak.Pointer[byte]) bool {
	_, ok := dialRecords.Load(key)
	return ok
}
