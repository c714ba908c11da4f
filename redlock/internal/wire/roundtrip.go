package wire

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// A RoundTrip is one exchange with a node as its transport made it: a
// pipeline's batch (which may carry many callers' commands), or a direct
// call. Each transport hands every round trip it makes to the function it
// was made with (NewPipeline, NewDirect), on the goroutine that made it,
// before the replies are delivered: that function must not block.
type RoundTrip struct {
	// Sent and Received are when it went and came back: for a pipeline's
	// batch, its first trip (a command that runs again after NOSCRIPT is
	// not timed apart); for a direct call, the whole call.
	Sent, Received time.Time
	// Commands is how many of the Locker's commands it carried; the node
	// guard's companions and a WAIT that rode with them are not counted.
	Commands int
	// Command is the name of the first of them, as go-redis gives it
	// (lower case: "set", "evalsha").
	Command string
	// Err is the first of its commands' errors, a nil reply (SET's grant)
	// aside: a failure of the trip (a timeout, a refused connection) or a
	// command's error reply. A call that ran out of its own time has
	// ErrNodeTimeout. Nil when every command got its reply.
	Err error
}

// tripError is a command's error as a RoundTrip's Err: none for a nil
// reply, which is an answer (SET's grant). With timeout > 0 (a pipeline's
// batch, whose context is its own, never a caller's) a deadline is the
// batch's, as ErrNodeTimeout (as deliver makes it); the direct transport
// passes 0, having told its own deadline from its caller's already.
func tripError(err error, timeout time.Duration) error {
	switch {
	case errors.Is(err, redis.Nil):
		return nil
	case timeout > 0 && errors.Is(err, context.DeadlineExceeded):
		return nodeTimeout(timeout, err)
	}
	return err
}
