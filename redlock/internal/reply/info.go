package reply

import "strings"

// InfoField returns the value of the INFO field named by prefix (which ends
// in ':'), up to the end of its line. It allocates nothing: the node guard
// reads INFO companions with it on the hot path.
func InfoField(info, prefix string) (string, bool) {
	i := strings.Index(info, "\n"+prefix)
	if i < 0 {
		if !strings.HasPrefix(info, prefix) {
			return "", false
		}
		i = -1
	}
	v := info[i+1+len(prefix):]
	if j := strings.IndexAny(v, "\r\n"); j >= 0 {
		v = v[:j]
	}
	return v, true
}

// InfoFields returns the "name:value" lines of an INFO reply.
func InfoFields(info string) map[string]string {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields
}
