package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock/internal/reply"
)

// ErrNotReplicated matches the verdict of a WAIT (or WAITAOF) that too few
// acknowledged (re-exported as redlock.ErrNotReplicated).
var ErrNotReplicated = errors.New("redlock: write not acknowledged by enough replicas")

// Wait is the WAIT (or WAITAOF) that follows, on the same connection, the
// commands whose grants must be replicated.
//
// Why on the same connection: WAIT covers every earlier write of its own
// connection, and nothing else. So the pipeline appends one WAIT to a
// batch (it covers every command of the batch), and the direct transport
// sends the command and the WAIT as one two-command pipeline.
type Wait struct {
	replicas int
	aof      bool
	timeout  time.Duration // the server's wait: WAIT's timeout argument
	name     string        // WAIT or WAITAOF, for errors
	args     []any
}

// NewWait returns the WAIT for replicas replicas (and the local AOF fsync,
// with aof), or nil when there is nothing to wait for.
//
// The WAIT timeout is half the nodeTimeout, at least 1 ms: a WAIT whose
// replicas lag returns its count when its timeout ends, and the other half of
// the nodeTimeout is left for the command's and the WAIT's replies to come
// back, so that such a node votes "not replicated" rather than timing out.
// (A timeout of 0 would block until the replicas answer, for ever if they
// never do.)
func NewWait(replicas int, aof bool, nodeTimeout time.Duration) *Wait {
	if replicas == 0 && !aof {
		return nil
	}
	ms := max(1, (nodeTimeout / 2).Milliseconds())
	w := &Wait{replicas: replicas, aof: aof, timeout: time.Duration(ms) * time.Millisecond}
	if aof {
		w.name, w.args = "WAITAOF", []any{"waitaof", 1, replicas, ms}
	} else {
		w.name, w.args = "WAIT", []any{"wait", replicas, ms}
	}
	return w
}

// within returns the WAIT's arguments for a second WAIT on the same call (a
// script resent after NOSCRIPT): its timeout is at most half of what is left
// of ctx, so that the node still answers before its NodeTimeout even when
// both WAITs run their whole timeout (replicas that lag or are gone).
func (w *Wait) within(ctx context.Context) []any {
	deadline, ok := ctx.Deadline()
	if !ok {
		return w.args
	}
	ms := max(1, min(w.timeout, time.Until(deadline)/2).Milliseconds())
	args := append([]any(nil), w.args...)
	args[len(args)-1] = ms
	return args
}

// Verdict reads the WAIT's reply: nil when the write was acknowledged as
// asked, an error matching ErrNotReplicated when too few acknowledged, and
// the node's error otherwise (a server without WAITAOF, or with appendonly
// off, says so in it).
func (w *Wait) Verdict(cmd *redis.Cmd) error {
	res, err := cmd.Result()
	if err != nil {
		switch {
		case reply.DeniedByACL(err):
			return reply.Denied(w.name, err)
		case w.aof && strings.Contains(err.Error(), "unknown command"):
			return fmt.Errorf("redlock: Options.WaitAOF: the node has no WAITAOF (it needs Redis 7.2 or newer, or Valkey): %w", err)
		case w.aof && strings.Contains(err.Error(), "appendonly"):
			return fmt.Errorf("redlock: Options.WaitAOF: the node runs with appendonly no, so there is no fsync to wait for: %w", err)
		}
		return fmt.Errorf("redlock: %s: %w", w.name, err)
	}
	if !w.aof {
		n, ok := res.(int64)
		if !ok {
			return fmt.Errorf("redlock: WAIT replied %v (%T), not a count", res, res)
		}
		if n < int64(w.replicas) {
			return &notReplicatedError{replicas: n, want: w.replicas, within: w.timeout}
		}
		return nil
	}
	pair, ok := res.([]any)
	if !ok || len(pair) != 2 {
		return fmt.Errorf("redlock: WAITAOF replied %v (%T), not [local, replicas]", res, res)
	}
	local, ok1 := pair[0].(int64)
	replicas, ok2 := pair[1].(int64)
	if !ok1 || !ok2 {
		return fmt.Errorf("redlock: WAITAOF replied %v, not two counts", res)
	}
	if local < 1 || replicas < int64(w.replicas) {
		return &notReplicatedError{aof: true, local: local, replicas: replicas, want: w.replicas, within: w.timeout}
	}
	return nil
}

// notReplicatedError says how many acknowledged.
type notReplicatedError struct {
	aof             bool
	local, replicas int64
	want            int
	within          time.Duration
}

func (e *notReplicatedError) Error() string {
	if e.aof {
		return fmt.Sprintf("%v: WAITAOF: %d of 1 local fsync and %d of %d replicas' fsyncs within %v", ErrNotReplicated, e.local, e.replicas, e.want, e.within)
	}
	return fmt.Sprintf("%v: WAIT: %d of %d replicas within %v", ErrNotReplicated, e.replicas, e.want, e.within)
}

func (e *notReplicatedError) Is(target error) bool { return target == ErrNotReplicated }

// CanWait reports whether a WAIT can follow a command on n's own
// connection: a *redis.Client, or a *redis.ClusterClient (through the
// master of the key's slot: see cluster.go).
func CanWait(n Node) bool {
	switch n.(type) {
	case *redis.Client, *redis.ClusterClient:
		return true
	}
	return false
}
