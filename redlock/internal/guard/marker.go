package guard

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redlock/redlock/internal/hashtag"
)

// The guard's marker on each node (see doc.go): its name, the century-long
// expiry that names each write of it, and its fields as the guard writes
// and reads them.

// markerExpiry returns a new absolute expiry for a standalone node's marker,
// in Unix milliseconds: a random instant 100 to 200 years ahead. Random, so
// that no two writes of the marker share one and the expiry names the
// marker; that far ahead, so that it never expires in earnest (a clock that
// leaps a century ahead loses it, and the guard sees a missing marker).
func markerExpiry() int64 {
	const century = 100 * 365 * 24 * time.Hour
	return time.Now().Add(century + rand.N(century)).UnixMilli()
}

// markerKey is the guard's marker on every node but a Redis Cluster.
const markerKey = "redlock:memory"

// IsMarker reports whether name is a marker the guard writes: markerKey, or
// a hash slot's marker on a Redis Cluster. No lock may take such a name
// (redlock's keys.go): a Revoke of it, say, would quarantine every node.
func IsMarker(name string) bool {
	return name == markerKey || strings.HasPrefix(name, markerKey+":{") && name == slotMarker(hashtag.Slot(name))
}

// slotMarker is the marker of a hash slot on a Redis Cluster.
func slotMarker(slot int) string {
	return markerKey + ":{" + hashtag.TagFor(slot) + "}"
}

// markerFields is a marker's content (see examine.lua).
type markerFields struct {
	began    int64         // when the memory began (Unix ms, the node's clock)
	run      string        // the server that wrote it: its run_id ("?": not said; "<run_id>@<node id>" on a Redis Cluster)
	declared time.Duration // the longest MaxTTL a Locker declared (0: none said)
	history  history
	evicted  int64 // keys the process had evicted when it was written (-1: not said)
}

// parseMarker reads a marker, "<began> <run_id> <maxttl> <replid> <fed>
// <wait> <replicas> <evicted>", or one written by earlier versions, with
// only the first two or three fields (no history: never covered).
func parseMarker(value string) (markerFields, error) {
	m := markerFields{evicted: -1}
	f := strings.Fields(value)
	if len(f) != 2 && len(f) != 3 && len(f) != 8 {
		return m, fmt.Errorf("holds %q, not \"<ms> <run_id> <maxttl ms> <replid> <fed> <wait> <replicas> <evicted>\"", value)
	}
	var err error
	if m.began, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return m, fmt.Errorf("holds %q, whose first field is not a time in ms", value)
	}
	m.run = f[1]
	if len(f) >= 3 {
		var ok bool
		if m.declared, ok = parseDeclared(f[2]); !ok {
			return m, fmt.Errorf("holds %q, whose MaxTTL field is not in ms", value)
		}
	}
	if len(f) == 8 {
		if m.history, err = parseHistory(f[3], f[5], f[6]); err != nil {
			return m, fmt.Errorf("holds %q: %w", value, err)
		}
		if m.evicted, err = strconv.ParseInt(f[7], 10, 64); err != nil || m.evicted < 0 {
			return m, fmt.Errorf("holds %q, whose evicted field is not a count", value)
		}
	}
	return m, nil
}

// parseDeclared reads a marker's MaxTTL field as a quarantine's length
// (declaredTTL); ok is false where it is not a number of ms. A number no
// int64 holds reads as the largest, and so as MaxTTLLimit.
func parseDeclared(field string) (_ time.Duration, ok bool) {
	ms, err := strconv.ParseInt(field, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return declaredTTL(ms), true
}

// declaredTTL reads a marker's MaxTTL field (ms) as a quarantine's length.
// It is input from a node, written by any Locker or by hand: a value within
// [0, MaxTTLLimit] is taken as it is; one above counts as MaxTTLLimit (a
// quarantine a value out of range asks for is never shortened by it, and
// never overflows into the past either); a negative one says nothing (0:
// the Locker's own MaxTTL stands).
func declaredTTL(ms int64) time.Duration {
	switch {
	case ms < 0:
		return 0
	case ms > MaxTTLLimit.Milliseconds():
		return MaxTTLLimit
	}
	return time.Duration(ms) * time.Millisecond
}
