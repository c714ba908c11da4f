package redlock

import (
	"context"
	"fmt"

	"github.com/redlock/redlock/redlock/internal/wire"
)

// Waiting is how many Lock calls of l wait for key in its queue (package waitq),
// for the tests of waiting.
func Waiting(l *Locker, key string) int { return l.turns.Waiting(key) }

// NoSplitBackoff turns off the growing wait after attempts that split the
// nodes (Locker.splitBackoff), for the livelock test's control; the
// returned function restores it.
func NoSplitBackoff() (restore func()) {
	splitBackoffOff.Store(true)
	return func() { splitBackoffOff.Store(false) }
}

// BeforeListen runs f between each Lock's first failed attempt and its
// subscription to the key's release notices; the returned function
// restores it.
func BeforeListen(f func()) (restore func()) {
	beforeListen.Store(&f)
	return func() { beforeListen.Store(nil) }
}

// NoRetryAfterListen drops the attempt that follows a Lock's subscription
// (the lost-wake-up test's control); the returned function restores it.
func NoRetryAfterListen() (restore func()) {
	noRetryAfterListen.Store(true)
	return func() { noRetryAfterListen.Store(false) }
}

// Listening is how many nodes confirmed l's subscription to key's release
// notices.
func Listening(l *Locker, key string) int { return l.notices.Confirmed(key) }

// Subscribers is how many subscriber connections l has open.
func Subscribers(l *Locker) int { return l.notices.Connections() }

// NoLines stops Lockers from joining keys' lines of waiting Lockers (the
// turns test's control); the returned function restores it.
func NoLines() (restore func()) {
	noLines.Store(true)
	return func() { noLines.Store(false) }
}

// ID is l's id in keys' lines.
func ID(l *Locker) string { return l.id }

// FencingPhase2 sets when a fenced acquisition runs phase 2: "fast" (the
// library's choice: only where the phase-1 counters disagree), "always"
// (the fast path off), "never" (the maximum alone: unsafe, the control of
// the schedule tests). It returns the restore.
func FencingPhase2(mode string) (restore func()) {
	modes := map[string]int32{"fast": phase2Fast, "always": phase2Always, "never": phase2Never}
	m, ok := modes[mode]
	if !ok {
		panic("FencingPhase2: unknown mode " + mode)
	}
	old := phase2Mode.Swap(m)
	return func() { phase2Mode.Store(old) }
}

// Reseal gives h the seal of its fields as they stand: for tests of what
// Resume checks beyond the seal (a token above the counters).
func Reseal(h Handle) Handle {
	h.Seal = h.seal()
	return h
}

// TrustNewNodesUnconditionally makes TrustNewNodes trust every node it
// checked whatever changed since (the unsafe control); it returns the
// restore.
func TrustNewNodesUnconditionally() (restore func()) {
	unconditionalTrust.Store(true)
	return func() { unconditionalTrust.Store(false) }
}

// scripts are every script the coordinator sends (Warm loads some of them:
// warmScripts).
var scripts = []*wire.Script{releaseScript, joinScript, extendScript, revokeScript, inspectScript, checkScript,
	acquireFencedScript, fenceScript, recordScript, acquireMultiScript, releaseMultiScript, extendMultiScript,
	checkMultiScript, fenceMultiScript, resumeScript}

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
