package redlock

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

// MaxOwnerLen is the longest Options.Owner accepted, in bytes: the label
// travels with every acquisition to every node.
const MaxOwnerLen = 200

// ownerSep ends the owner label in a lock value: "<owner>|<random>".
const ownerSep = '|'

// randomLen is the length of a value's random part: 128 bits, base64url
// without padding.
const randomLen = 22

// checkOwner says what is wrong with an Options.Owner, if anything.
func checkOwner(owner string) error {
	switch {
	case len(owner) > MaxOwnerLen:
		return fmt.Errorf("redlock: Options.Owner is %d bytes; at most MaxOwnerLen (%d)", len(owner), MaxOwnerLen)
	case strings.TrimSpace(owner) != owner:
		return fmt.Errorf("redlock: Options.Owner %q begins or ends with a space", owner)
	}
	for i := 0; i < len(owner); i++ {
		if c := owner[i]; c < ' ' || c > '~' || c == ownerSep {
			return fmt.Errorf("redlock: Options.Owner %q: byte %d (%q) is not printable ASCII other than %q", owner, i, c, ownerSep)
		}
	}
	return nil
}

// newValue returns a fresh lock value: 128 random bits, base64url-encoded,
// unique per acquisition, after owner and '|' where an owner is set.
func newValue(owner string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
	if owner == "" {
		return base64.RawURLEncoding.EncodeToString(b[:])
	}
	buf := make([]byte, len(owner)+1+randomLen)
	copy(buf, owner)
	buf[len(owner)] = ownerSep
	base64.RawURLEncoding.Encode(buf[len(owner)+1:], b[:])
	return string(buf)
}

// OwnerOf returns the owner label in a lock value that a Locker with
// Options.Owner set (Lease.Value, Inspect's NodeHolding.Value), or "" for a
// value without one (another Locker's, or another library's).
func OwnerOf(value string) string {
	if i := len(value) - randomLen - 1; i > 0 && value[i] == ownerSep {
		return value[:i]
	}
	return ""
}
