package guard

import (
	"errors"
	"fmt"
	"time"
)

// ErrNodeQuarantined matches the vote of a node that the guard keeps out of
// the quorum for now: its memory began less than Options.MaxTTL ago, so a
// key it granted before may still be held by someone, or its clock jumped
// forward less than MaxTTL ago, so a key it granted before the jump may have
// expired early. The *QuorumError names the node, the cause and how long is
// left.
var ErrNodeQuarantined = errors.New("redlock: node quarantined")

// QuarantineError is a quarantined node's vote: how long is left (0: for
// this round trip only) and why.
type QuarantineError struct {
	Left  time.Duration
	Cause string
	// Forgot is set where the node's memory began less than MaxTTL ago (a
	// new server, or one that forgot), not where its clock jumped: the
	// one quarantine an operator may lift (Locker.TrustNodes) for servers
	// known to hold no locks.
	Forgot bool
	// JumpLeft is how long the quarantine for a clock jump lasts (0:
	// none), which a trust does not lift.
	JumpLeft time.Duration
}

func (e *QuarantineError) Error() string {
	if e.Left <= 0 {
		return fmt.Sprintf("%v for this round trip: %s", ErrNodeQuarantined, e.Cause)
	}
	return fmt.Sprintf("%v for %v more: %s", ErrNodeQuarantined, e.Left.Round(time.Millisecond), e.Cause)
}

func (e *QuarantineError) Is(target error) bool { return target == ErrNodeQuarantined }

// What a quarantine says of its cause.
const (
	memoryCause = "its memory began less than MaxTTL ago: a server new to the deployment, or one that forgot (a restart without persistence, a flush, an eviction, a failover to a replica that may lack grants because not every replica was waited for)"
	jumpCause   = "its clock jumped forward by %v less than MaxTTL ago, so keys it granted before may have expired early"
)
