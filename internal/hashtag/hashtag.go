// Package hashtag derives keys that share a key's Redis Cluster hash slot, for
// the auxiliary keys (fencing counters, accepted tokens) that scripts must
// reach together with the key itself.
package hashtag

import (
	"fmt"
	"strings"
)

// Tagged reports whether key has a {tag}: the first '{' followed, not at
// once, by a '}'. Redis Cluster hashes only the tag of such a key.
func Tagged(key string) bool {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		return strings.IndexByte(key[open+1:], '}') > 0
	}
	return false
}

// Beside returns key+suffix, or {key}+suffix, whichever hashes to key's slot:
// Redis Cluster hashes only the first non-empty {tag} of a key, or the whole
// key if it has none. A key with no tag that contains '}' cannot be wrapped.
func Beside(key, suffix string) (string, error) {
	if Tagged(key) {
		return key + suffix, nil // the first {tag} still decides the slot
	}
	if strings.ContainsRune(key, '}') {
		return "", fmt.Errorf("key %q cannot be wrapped in a hash tag (it contains '}' but no {tag}); give it a {tag}", key)
	}
	return "{" + key + "}" + suffix, nil
}
