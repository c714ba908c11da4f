package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/redlock/internal/reply"
)

// Warm readies every node for a first acquisition that is as fast as the
// ones after it: it dials each node (TCP, the TLS handshake, and the client's
// HELLO and AUTH, several round trips in all) and loads the library's Lua
// scripts there, recording the digest each node names for them, so that
// they go by digest (EVALSHA) from the first call: the library computes no
// digest itself (see docs/operations.md, Go's FIPS 140-3 mode). Call it
// after New and before the first TryLock, Lock or Do.
//
// Why: every call to a node is bounded by NodeTimeout, which is sized for
// one round trip of a command. A new Locker's first acquisition would
// otherwise spend that budget on connecting, and on a TLS link with a few
// milliseconds of latency it fails although every node is healthy. Warm has
// no NodeTimeout: ctx bounds it, so give it a deadline of seconds.
//
// Warm asks the nodes in parallel and returns once all have answered or ctx
// ends. It returns nil when every node is ready, and otherwise a *WarmError
// that lists each node's result. A Locker whose nodes are partly warm works
// (a cold node dials on first use, as without Warm), so the error is for
// reporting: a node that cannot be reached, a TLS or AUTH failure, a user
// not allowed SCRIPT LOAD, or a node that names a script otherwise than
// the others did, named now rather than at the first lock.
//
// Warm also asks each node which server answers (INFO server's run_id; on
// a Redis Cluster node, every master's), with or without the node guard:
// of two nodes that are one server under two names, the later fails with
// ErrDuplicateNode, naming both. Fix the node list: such a Locker's majority
// counts that server twice where the guard is off, and without one of the
// two where it is on.
//
// Warm opens one connection per node, which is what one caller at a time
// uses (and what the auto-pipeline uses under load). Callers that lock
// concurrently over Options.NoAutoPipeline use a connection each: set the
// clients' MinIdleConns to that concurrency, and Warm opens that many.
// Connections idle longer than the client's ConnMaxIdleTime are closed by
// go-redis; Warm again after a long idle spell if it matters.
func (l *Locker) Warm(ctx context.Context) error {
	if err := l.made("Warm"); err != nil {
		return err
	}
	if ctx == nil {
		return errors.New("redlock: Warm: nil context")
	}
	type answer struct {
		i    int
		err  error
		runs []string // the servers that answer for the node (see identity.go)
	}
	answers := make(chan answer, len(l.nodes)) // buffered: a straggler never blocks
	for i, n := range l.nodes {
		go func() {
			err := n.warm(ctx)
			var runs []string
			if err == nil && len(l.nodes) > 1 {
				runs = n.servers(ctx)
			}
			answers <- answer{i, err, runs}
		}()
	}
	runs := make([][]string, len(l.nodes))
	results := make([]NodeResult, len(l.nodes))
	for i, n := range l.nodes {
		results[i] = NodeResult{Node: i, Name: n.name, Outcome: Failed} // until it answers
	}
collect:
	for range l.nodes {
		select {
		case a := <-answers:
			if a.err == nil {
				results[a.i].Outcome = Granted
			}
			results[a.i].Err, runs[a.i] = a.err, a.runs
		case <-ctx.Done():
			// A call blocked on a read waits for the client's ReadTimeout,
			// not for ctx; it ends in the background.
			break collect
		}
	}
	failed := false
	for i := range results {
		if err := duplicate(l.nodes, runs, i); err != nil && results[i].Err == nil {
			results[i].Outcome, results[i].Err = Failed, err
		}
		if results[i].Outcome == Failed && results[i].Err == nil {
			results[i].Err = fmt.Errorf("no answer before the context ended: %w", context.Cause(ctx))
		}
		failed = failed || results[i].Err != nil
	}
	if failed {
		return &WarmError{Nodes: results}
	}
	return nil
}

// warm dials the node and loads the scripts, so that neither a handshake
// nor a NOSCRIPT round trip falls on a lock's first call, and records
// their digests as the node names them, so that the scripts go by digest
// (EVALSHA) from the first call. A *redis.Client
// gets as many connections as its MinIdleConns asks for (at least one),
// held together so that each is a separate one, then returned to its pool
// idle.
func (n node) warm(ctx context.Context) error {
	if err := n.dial(ctx); err != nil {
		return fmt.Errorf("PING: %w", reply.Denied("PING", err))
	}
	for _, s := range warmScripts {
		digest, err := n.ScriptLoad(ctx, s.Src).Result()
		if err != nil {
			return fmt.Errorf("SCRIPT LOAD: %w", reply.Denied("SCRIPT LOAD of the "+s.Name+" script", err))
		}
		// The node's answer is the script's digest on this node from now
		// on (the client computes none: see wire.Script); a node that
		// names it otherwise later is refused.
		if err := n.link.Names().Record(s.Script, digest); err != nil {
			return fmt.Errorf("SCRIPT LOAD of the %s script: %w", s.Name, err)
		}
	}
	// The node guard examines the node now rather than on the first lock.
	// Never with SCRIPT LOAD: the examine script's presence in the cache
	// tells every Locker that the node was examined since its process
	// started (see internal/guard). A Redis Cluster node has a marker per
	// slot: each is examined on its first use.
	if n.guard != nil {
		if err := n.guard.Warm(ctx, n.Node); err != nil {
			return err
		}
	}
	return nil
}

// dial opens the node's connections with a PING on each.
func (n node) dial(ctx context.Context) error {
	c, ok := n.Node.(*redis.Client)
	if !ok {
		return n.Do(ctx, "PING").Err()
	}
	// One after another: go-redis (v9.23) races when two of a client's
	// dedicated Conns run their first command at once (both write the
	// shared Options in initConn).
	conns := make([]*redis.Conn, 0, max(1, c.Options().MinIdleConns))
	defer func() {
		for _, cn := range conns {
			cn.Close() // back to the pool, idle
		}
	}()
	for range cap(conns) {
		cn := c.Conn()
		conns = append(conns, cn)
		if err := cn.Ping(ctx).Err(); err != nil {
			return err
		}
	}
	// go-redis keeps pipelines in a pool of their own, and the
	// auto-pipeline's batches are pipelines whenever the node guard's
	// companions or a WAIT ride with them.
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() })
	return err
}

// WarmError reports the nodes that Warm could not ready, with every node's
// result (Outcome Granted for a ready node, Failed with Err otherwise).
// errors.Is and errors.As see each node's error.
type WarmError struct {
	Nodes []NodeResult
}

func (e *WarmError) Error() string {
	var b strings.Builder
	ready := 0
	for _, n := range e.Nodes {
		if n.Err == nil {
			ready++
		}
	}
	fmt.Fprintf(&b, "redlock: warm: %d of %d nodes ready", ready, len(e.Nodes))
	for _, n := range e.Nodes {
		if n.Err != nil {
			fmt.Fprintf(&b, "; %s: %v", n.Name, n.Err)
		}
	}
	return b.String()
}

// Unwrap returns each node's error.
func (e *WarmError) Unwrap() []error {
	var errs []error
	for _, n := range e.Nodes {
		if n.Err != nil {
			errs = append(errs, n.Err)
		}
	}
	return errs
}
