package redlock

import (
	"errors"

	"github.com/redlock/redlock/redlock/internal/reply"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// ErrNoPermission matches a node's refusal under its access control list:
// the user the client logs in as may not run a command the library sends, a
// command one of its scripts calls, or touch the key. Such a node's vote
// fails (it is never counted as contention), and the error says which
// command or script was refused and what the script calls. docs/operations.md's
// "Least-privilege ACL" section lists everything the library needs.
var ErrNoPermission = reply.ErrNoPermission

// explainDenied is reply.Denied for a node's error in a round that sent c. Only a
// round that failed explains its errors (roundError), so a round that
// succeeds pays nothing for it.
func explainDenied(c wire.Command, err error) error {
	if !reply.DeniedByACL(err) || errors.Is(err, ErrNoPermission) {
		// Not a refusal, or one that already names what was refused
		// (the guard's examination, its companions): no description is
		// built.
		return err
	}
	return reply.Denied(c.Describe(), err)
}
