// Package reply reads what a Redis node says beyond a command's own value:
// a refusal under its access control list, the fields of an INFO reply, and
// a Redis Cluster redirection. The transport (internal/wire), the node
// guard (internal/guard) and the coordinator (redlock) all read such
// replies, and each must read them alike, so the reading lives here once.
//
// It imports go-redis and the standard library, nothing of the module.
package reply

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrNoPermission matches a node's refusal under its access control list
// (re-exported as redlock.ErrNoPermission, whose documentation says more).
var ErrNoPermission = errors.New("redlock: refused by the node's ACL")

// permissionError is a refusal under the node's ACL, with what was refused.
type permissionError struct {
	what string // "SET on \"k\"", "the release script on \"k\" (...)"
	err  error  // the server's reply
}

func (e *permissionError) Error() string {
	return fmt.Sprintf("%v: %s: %v", ErrNoPermission, e.what, e.err)
}
func (e *permissionError) Unwrap() []error { return []error{ErrNoPermission, e.err} }

// DeniedByACL reports whether err is a server's refusal under its ACL. The
// servers word it differently: NOPERM for a command or a key refused
// outright (Redis 7.0: "NOPERM this user has no permissions to run the 'x'
// command"; Redis 8.0 and Valkey 8.1: "NOPERM User u has no permissions to
// run the 'x' command"), and for a command refused inside a script, Redis
// 7.0 answers "ERR The user executing the script can't run this command or
// subcommand" (which does not name it), Redis 8.0 and Valkey 8.1 "ERR ACL
// failure in script: ...".
func DeniedByACL(err error) bool {
	if err == nil {
		return false
	}
	if redis.HasErrorPrefix(err, "NOPERM") {
		return true
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.Contains(msg, "ACL failure in script") || strings.Contains(msg, "user executing the script can't run")
}

// Denied returns err as an error matching ErrNoPermission that names what
// (the command or script refused) when err is the node's ACL refusal, and
// err otherwise.
func Denied(what string, err error) error {
	if !DeniedByACL(err) {
		return err
	}
	return &permissionError{what: what, err: err}
}
