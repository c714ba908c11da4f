package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// sendPaired is the direct transport's send of a command that needs
// company on its own connection: the WAIT of Options.WaitReplicas (w), which
// covers only the writes before it on its connection, and the node guard's
// companions (g), which must follow the command to vouch for the memory it
// found. Both go with c as one pipeline: a script as EVALSHA, then with EVAL
// (and a second WAIT) after NOSCRIPT. On a Redis Cluster node the pipeline
// goes to the master of c's slot and follows its MOVED and ASK redirections
// itself (see clusterRoute), since it bypasses the ClusterClient's own.
// It returns c's reply, the WAIT's verdict and the guard's.
func (n node) sendPaired(ctx context.Context, c command, w *waitSpec, g *guard) (cmd *redis.Cmd, notReplicated, verdict error) {
	switch n.Node.(type) {
	case *redis.Client, *redis.ClusterClient:
	default: // no WAIT here: New requires one of those for it (checkReplicable)
		return n.sendInTurn(ctx, c, g)
	}
	route, err := n.routeFor(ctx, c.key)
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd, nil, nil
	}
	args := c.wire()
	var waitArgs []any
	if w != nil {
		waitArgs = w.args
	}
	suspect := false // a NOSCRIPT: the node's script cache is new
	for {
		pipe := route.conn.Pipeline()
		if route.asking {
			_ = pipe.Process(ctx, redis.NewStatusCmd(ctx, "asking"))
		}
		cmd := redis.NewCmd(ctx, args...)
		_ = pipe.Process(ctx, cmd)
		var comp companions
		if g != nil {
			comp = g.companions(ctx, g.markerFor(c.key))
			var cmds [3]redis.Cmder
			for _, c := range comp.appendTo(cmds[:0]) {
				_ = pipe.Process(ctx, c)
			}
		}
		var wait *redis.Cmd
		if w != nil {
			wait = redis.NewCmd(ctx, waitArgs...)
			_ = pipe.Process(ctx, wait)
		}
		sent := time.Now()
		_, _ = pipe.Exec(ctx)
		received := time.Now()
		if c.script != nil && args[0] == "evalsha" && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			args = append([]any{"eval", c.script.src}, args[2:]...)
			if w != nil {
				waitArgs = w.within(ctx)
			}
			suspect = true
			continue
		}
		if route.follow(ctx, cmd.Err()) {
			if w != nil {
				waitArgs = w.within(ctx)
			}
			continue
		}
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) { // nil is SET's grant
			if g != nil && redis.HasErrorPrefix(err, "READONLY") {
				g.demoted()
			}
			return cmd, nil, nil // the command's own error decides
		}
		if w != nil {
			notReplicated = w.verdict(wait)
		}
		if g != nil {
			verdict = g.judge(ctx, n.Node, comp, sent, received, suspect)
		}
		return cmd, notReplicated, verdict
	}
}

// sendInTurn is sendPaired for a Node that cannot pipeline (a wrapper that
// offers only Do and the script calls): the guard's companions follow the
// command's reply, side by side, so that they cost one more round trip.
func (n node) sendInTurn(ctx context.Context, c command, g *guard) (*redis.Cmd, error, error) {
	sent := time.Now()
	cmd := n.send(ctx, c)
	if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return cmd, nil, nil
	}
	comp := g.companions(ctx, g.markerFor(c.key))
	var wg sync.WaitGroup
	if comp.pttl != nil {
		wg.Go(func() {
			left, err := n.Do(ctx, comp.pttl.Args()...).Int64()
			comp.pttl.SetVal(left)
			comp.pttl.SetErr(err)
		})
	} else {
		wg.Go(func() {
			value, err := n.Do(ctx, comp.get.Args()...).Text()
			comp.get.SetVal(value)
			comp.get.SetErr(err)
		})
	}
	wg.Go(func() {
		cached, err := n.Do(ctx, comp.exists.Args()...).BoolSlice()
		comp.exists.SetVal(cached)
		comp.exists.SetErr(err)
	})
	if comp.time != nil {
		wg.Go(func() {
			at, err := timeOf(n.Do(ctx, comp.time.Args()...))
			comp.time.SetVal(at)
			comp.time.SetErr(err)
		})
	}
	wg.Wait()
	return cmd, nil, g.judge(ctx, n.Node, comp, sent, time.Now(), false)
}

// timeOf reads a TIME reply that came as a generic Cmd: [seconds,
// microseconds].
func timeOf(cmd *redis.Cmd) (time.Time, error) {
	res, err := cmd.StringSlice()
	if err != nil {
		return time.Time{}, err
	}
	if len(res) == 2 {
		if at, err := timeOfReply(res[0], res[1]); err == nil {
			return at, nil
		}
	}
	return time.Time{}, fmt.Errorf("redlock: unexpected TIME reply %v", res)
}
