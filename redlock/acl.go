package redlock

import (
	"errors"

	"github.com/redlock/redlock/redlock/internal/reply"
	"github.com/redlock/redlock/redlock/internal/wire"
)

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
