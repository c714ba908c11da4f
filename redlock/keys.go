package redlock

import (
	"context"
	"fmt"
	"strings"

	"github.com/redlock/redlock/internal/hashtag"
	"github.com/redlock/redlock/redlock/internal/guard"
	"github.com/redlock/redlock/redlock/internal/notice"
)

// The names the library writes on the nodes besides the locks themselves,
// in one place: what each is, and checkKey, which refuses every one of
// them as a lock's name wherever a caller names a key (TryLock, Lock, the
// Multi forms, Do, Inspect, Revoke, Resume, and so redlock-admin). A lock
// by such a name would fight the library for it: a fencing counter taken
// as a lock never frees (INCR needs a number), a revoked marker quarantines
// every node of every Locker for MaxTTL, a line or a tombstone taken as a
// lock answers "busy" for ever.
//
//   - key+":fencing": a lock's fencing counter (Options.Fencing), kept for
//     good.
//   - key+":fencing-token" (a key with a {tag}), "{key}:fencing-token-untagged"
//     (one without): the token of the lock's latest fenced acquisition,
//     with its value ("token value"), which Inspect shows as the holder's
//     Lease.Token; kept for good, as the counter is. Two suffixes, so that
//     locks "a" and "{a}", which share a counter (harmless: it only grows),
//     keep a record each.
//   - key+":redlock-revoked": a lock's revocation tombstone (Revoke), for
//     as long as the key had left.
//   - key+":redlock-waiters": the line of Lockers waiting for a lock
//     (Lock's turns across processes), for lineTTL after its last use.
//   - key+":redlock-released": a lock's release channel (a pub/sub
//     channel, not a key, but named the same way so that a Redis Cluster
//     shard publishes it from a script that names only the key).
//   - "redlock:memory", and on a Redis Cluster "redlock:memory:{tag}" per
//     hash slot: the node guard's marker of when the node's memory began.
//
// Each name beside a key is hashtag.Beside(key, suffix): the key's own
// {tag} where it has one, else the key wrapped in one, so that it shares
// the key's hash slot.
const (
	counterSuffix   = ":fencing"
	tokenSuffix     = ":fencing-token"
	untaggedSuffix  = ":fencing-token-untagged"
	tombstoneSuffix = ":redlock-revoked"
)

// besideKeys are the suffixes of the names beside a lock's key, and what
// each name is, for checkKey's error.
var besideKeys = []struct{ suffix, what string }{
	{counterSuffix, "the fencing counter of lock %q"},
	{tokenSuffix, "the fencing token record of lock %q"},
	{untaggedSuffix, "the fencing token record of lock %q"},
	{tombstoneSuffix, "the revocation tombstone of lock %q"},
	{notice.LineSuffix, "the line of Lockers waiting for lock %q"},
	{notice.Suffix, "the release channel of lock %q"},
}

// reservedAs reports what the library writes under name, if anything.
func reservedAs(name string) (what string, ok bool) {
	if guard.IsMarker(name) {
		return "the node guard's marker, every Locker's record of when the node's memory began", true
	}
	for _, b := range besideKeys {
		if lock, ok := besideOf(name, b.suffix); ok {
			return fmt.Sprintf(b.what, lock), true
		}
	}
	return "", false
}

// checkKey validates the arguments every operation on a key shares (the
// context's state aside).
func checkKey(ctx context.Context, op, key string) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("redlock: %s %q: nil context", op, key)
	case key == "":
		return fmt.Errorf("redlock: %s: empty key", op)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("redlock: %s: key of %d bytes is longer than MaxKeyLen (%d)", op, len(key), MaxKeyLen)
	}
	if what, ok := reservedAs(key); ok {
		return &ReservedNameError{Op: op, Key: key, What: what}
	}
	return nil
}

// counterKey returns the key of key's fencing counter, in key's hash slot.
func counterKey(key string) (string, error) {
	k, err := hashtag.Beside(key, counterSuffix)
	if err != nil {
		return "", fmt.Errorf("redlock: fencing: %w", err)
	}
	return k, nil
}

// tokenRecordKey returns the key where key's latest fenced acquisition
// records its token (see fence.lua), in key's hash slot: one per lock,
// even for two locks whose counters are one ("a" and "{a}").
func tokenRecordKey(key string) (string, error) {
	if hashtag.Tagged(key) {
		return key + tokenSuffix, nil
	}
	return hashtag.Beside(key, untaggedSuffix)
}

// tombstoneKey returns the key of key's revocation tombstone, in key's hash
// slot.
func tombstoneKey(key string) (string, error) { return hashtag.Beside(key, tombstoneSuffix) }

// auxiliaryKeys are key's fencing counter and revocation tombstone, which
// share its hash slot; an error for a key that cannot carry a hash tag.
func auxiliaryKeys(key string) (counter, tombstone string, err error) {
	if counter, err = counterKey(key); err != nil {
		return "", "", err
	}
	tombstone, err = tombstoneKey(key)
	return counter, tombstone, err
}

// besideOf reports whether key is hashtag.Beside(lock, suffix) for some
// lock, and which.
func besideOf(key, suffix string) (lock string, ok bool) {
	p, found := strings.CutSuffix(key, suffix)
	if !found {
		return "", false
	}
	var candidates []string
	if len(p) > 2 && p[0] == '{' && p[len(p)-1] == '}' {
		candidates = append(candidates, p[1:len(p)-1]) // an untagged lock's key is {lock}+suffix
	}
	candidates = append(candidates, p) // a tagged one's is lock+suffix
	for _, c := range candidates {
		if k, err := hashtag.Beside(c, suffix); err == nil && k == key {
			return c, true
		}
	}
	return "", false
}

// MaxKeyLen is the longest lock key accepted, in bytes. Redis allows far
// longer keys; a lock name this long is almost certainly a bug (a payload
// passed as the name), and it would be sent to every node on every attempt.
const MaxKeyLen = 8 << 10

// MaxMultiKeys is the most distinct keys one lease may cover.
const MaxMultiKeys = 64
