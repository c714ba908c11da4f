package redlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrNoPermission matches a node's refusal under its access control list:
// the user the client logs in as may not run a command the library sends, a
// command one of its scripts calls, or touch the key. Such a node's vote
// fails (it is never counted as contention), and the error says which
// command or script was refused and what the script calls. The README's
// "Least-privilege ACL" section lists everything the library needs.
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

// deniedByACL reports whether err is a server's refusal under its ACL. The
// servers word it differently: NOPERM for a command or a key refused
// outright (Redis 7.0: "NOPERM this user has no permissions to run the 'x'
// command"; Redis 8.0 and Valkey 8.1: "NOPERM User u has no permissions to
// run the 'x' command"), and for a command refused inside a script, Redis
// 7.0 answers "ERR The user executing the script can't run this command or
// subcommand" (which does not name it), Redis 8.0 and Valkey 8.1 "ERR ACL
// failure in script: ...".
func deniedByACL(err error) bool {
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

// denied returns err as a permissionError that names what (the command or
// script refused) when err is the node's ACL refusal, and err otherwise.
func denied(what string, err error) error {
	if !deniedByACL(err) {
		return err
	}
	return &permissionError{what: what, err: err}
}

// explainDenied is denied for a node's error in a round that sent c. Only a
// round that failed explains its errors (roundError), so a round that
// succeeds pays nothing for it.
func explainDenied(c command, err error) error {
	if !deniedByACL(err) || errors.Is(err, ErrNoPermission) {
		// Not a refusal, or one that already names what was refused
		// (the guard's examination, its companions): no description is
		// built.
		return err
	}
	return denied(c.describe(), err)
}

// describe names c for an error.
func (c command) describe() string {
	if c.script == nil {
		name, _ := c.args[0].(string)
		return fmt.Sprintf("%s on %q", strings.ToUpper(name), c.key)
	}
	return fmt.Sprintf("the %s script on %q (EVALSHA, EVAL after NOSCRIPT; it calls %s on %s)",
		c.script.name, c.key, c.script.calls, strings.Join(c.keys, " and "))
}
