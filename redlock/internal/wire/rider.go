package wire

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Rider sends commands that ride behind the commands it judges (those
// marked Guarded), on their connection, and judges them by the replies.
// The node guard is the one Rider: its companions must follow a SET on the
// same connection to vouch for the memory the SET found.
//
// R is one trip's worth of the rider's commands (the guard's companions),
// a value the transport keeps for the rider between Board and Judge, and
// passes back by value: its commands are pointers, which the transport
// sends and go-redis fills in. It is a type parameter, not an interface,
// and never passed by address, so that a trip costs no allocation for it.
type Rider[R any] interface {
	// Board returns the rider's commands for a trip whose first judged
	// command is on key.
	Board(ctx context.Context, key string) R
	// AppendTo appends r's commands to cmds, in the order they are sent
	// behind the trip's commands.
	AppendTo(r R, cmds []redis.Cmder) []redis.Cmder
	// AskApart sends r's commands one by one through n, for a node that
	// cannot pipeline (a wrapper that offers only Do and the script calls),
	// once the judged command has returned.
	AskApart(ctx context.Context, n Node, r R)
	// Judge reads r's replies and returns the verdict on the trip's judged
	// commands: nil lets their grants count. It may look at the node
	// through ex (the guard examines it).
	Judge(ctx context.Context, ex redis.Scripter, r R, t Trip) error
	// Demoted says that the node answered READONLY: a replica now.
	Demoted()
}

// Trip is when a trip went and what it met.
type Trip struct {
	Sent, Received time.Time
	// Suspect: a command of the trip met NOSCRIPT and ran again: the
	// node's script cache is new (a new server process, or a flush).
	Suspect bool
}
