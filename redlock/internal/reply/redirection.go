package reply

import "strings"

// Redirection parses a Redis Cluster's "MOVED <slot> <addr>" and
// "ASK <slot> <addr>".
func Redirection(err error) (ask bool, addr string, ok bool) {
	f := strings.Fields(err.Error())
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return false, "", false
	}
	return f[0] == "ASK", f[2], true
}
