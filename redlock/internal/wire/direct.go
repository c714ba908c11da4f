package wire

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/luascript"
)

// Direct is the transport of a node without a pipeline (any Node but a
// *redis.Client, or every node with Options.NoAutoPipeline): a goroutine
// and a pooled connection per call. It keeps no order between calls: a
// caller that needs one says what to wait for (Send.After, Send.Await).
type Direct[R any] struct {
	node    Node
	names   luascript.Names // the digests the node named (see Submit)
	wait    *Wait           // nil: none
	rider   Rider[R]        // nil: none
	sending atomic.Int32
	riders  sync.Pool       // of *[]redis.Cmder, to gather a rider's commands in
	outside *outsiders      // a Redis Cluster node's clients of masters its ClusterClient does not offer (see cluster.go); nil elsewhere
	onTrip  func(RoundTrip) // hears of every call sent to the node; nil: nothing does
}

// NewDirect returns n's direct transport, with the WAIT w after commands
// to replicate (nil: none) and rider after guarded ones (nil: none);
// onTrip, if set, hears of every call's round trip.
func NewDirect[R any](n Node, w *Wait, rider Rider[R], onTrip func(RoundTrip)) *Direct[R] {
	d := &Direct[R]{node: n, wait: w, rider: rider, onTrip: onTrip}
	d.riders.New = func() any { return new([]redis.Cmder) }
	if _, ok := n.(*redis.ClusterClient); ok {
		d.outside = new(outsiders)
	}
	return d
}

var _ Link = (*Direct[struct{}])(nil)

// maxSending bounds the calls outstanding on one node's Direct (a pipeline
// bounds its own queue). A node that stops answering would otherwise
// collect a goroutine (and a pooled connection, or a place in the pool's
// queue) for every call made to it, until the client library's timeouts
// free them; past the bound, calls to it fail at once (ErrNodeBusy).
// Releases refused this way leave that node's key to expire.
const maxSending = 128

func (d *Direct[R]) admit() bool {
	if d.sending.Add(1) > maxSending {
		d.sending.Add(-1)
		return false
	}
	return true
}

// Submit sends c from a goroutine of its own, and delivers its reply there.
// A script whose digest this node has not named is bound now as EVAL, and
// its first use learns the digest, as on the pipeline (see
// Pipeline.Submit): no call waits for it, and the form a call goes in is
// decided when it is submitted, on both transports.
func (d *Direct[R]) Submit(ctx context.Context, c Command, s Send, to Receiver, node int) {
	if c.Script != nil && d.names.Use(ctx, d.node, c.Script.Script, s.Timeout) == "" {
		c.Args = c.WireFor("")
	}
	go d.call(ctx, c, s, to, node)
}

// Names are the digests the node named for scripts.
func (d *Direct[R]) Names() *luascript.Names { return &d.names }

func (d *Direct[R]) call(ctx context.Context, c Command, s Send, to Receiver, node int) {
	var took time.Duration // the call's round trip, once sent
	var received time.Time // when it came back, once sent
	onWire := false        // it went to the node (not refused, nor stopped waiting for an earlier release)
	// The call is answered exactly once, even where a hook (go-redis's on
	// the node's client, or onTrip) ends this goroutine (runtime.Goexit):
	// with its reply if it has one, else as failed (ErrHookExited).
	var r Reply
	replied, finished := false, false
	defer func() { // the one place the reply goes
		if !replied {
			r = failed(ctx, ErrHookExited)
		}
		if s.Finish != nil && !finished {
			s.Finish()
		}
		to.Receive(node, r)
	}()
	r = func() Reply {
		if s.After != nil {
			<-s.After.Settled(node)
		}
		if s.Skip != nil {
			if err := s.Skip(node); err != nil {
				r := failed(ctx, err)
				r.Uncounted = true // not sent: says nothing of the node
				return r
			}
		}
		if !d.admit() {
			return failed(ctx, ErrNodeBusy)
		}
		defer d.sending.Add(-1)
		sent := time.Now()
		defer func() { received = time.Now(); took = received.Sub(sent) }()
		callCtx, cancel := context.WithTimeout(ctx, s.Timeout)
		defer cancel()
		if s.Await != nil {
			select {
			case <-s.Await:
			case <-callCtx.Done():
				return failed(ctx, fmt.Errorf("waiting for this Locker's earlier call on the node: %w", callCtx.Err()))
			}
		}
		w := d.wait
		if !c.Replicate {
			w = nil
		}
		guarded := c.Guarded && d.rider != nil
		onWire = true
		if w != nil || guarded {
			return d.sendPaired(callCtx, c, w, guarded)
		}
		return Reply{Cmd: d.send(callCtx, c)}
	}()
	replied = true
	if ctx.Err() == nil { // the call's own deadline, not the caller's
		if err := r.Cmd.Err(); errors.Is(err, context.DeadlineExceeded) {
			r.Cmd.SetErr(nodeTimeout(s.Timeout, err))
		}
		r.NotReplicated = ownDeadline(s.Timeout, r.NotReplicated)
		r.Verdict = ownDeadline(s.Timeout, r.Verdict)
	}
	finished = true
	if s.Finish != nil {
		s.Finish()
	}
	r.RTT, r.Received = took, received
	if onWire && d.onTrip != nil {
		// Reported before the reply goes, so that Drain covers it. The
		// call's own deadline is ErrNodeTimeout by now; the caller's stays
		// the caller's.
		d.onTrip(RoundTrip{Sent: received.Add(-took), Received: received, Commands: 1, Command: c.Name(), Err: tripError(r.Cmd.Err(), 0)})
	}
}

func ownDeadline(d time.Duration, err error) error {
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		return nodeTimeout(d, err)
	}
	return err
}

// send sends c on the node's client. A script goes as EVALSHA, then EVAL
// on NOSCRIPT; as EVAL alone where it was bound so (see Submit).
func (d *Direct[R]) send(ctx context.Context, c Command) *redis.Cmd {
	if c.Script == nil {
		return d.node.Do(ctx, c.Args...)
	}
	cmd := d.script(ctx, c)
	if one, ok := narrowed(c, cmd.Err()); ok {
		return d.script(ctx, one)
	}
	return cmd
}

// script runs c's script: as EVAL where it was bound so (the node had
// named no digest when it was submitted), else by the digest the node
// named, EVAL after NOSCRIPT (luascript.Names.Run).
func (d *Direct[R]) script(ctx context.Context, c Command) *redis.Cmd {
	if len(c.Args) > 0 && c.Args[0] == "eval" {
		return d.node.Eval(ctx, c.Script.Src, c.Keys, c.Argv...)
	}
	return d.names.Run(ctx, d.node, c.Script.Script, c.Keys, c.Argv...)
}

// narrowed returns c's single-key form (Script.SingleKey) when err is the
// TRYAGAIN a Redis Cluster gives a command naming several keys of a
// migrating slot that the node holds only some of; ok is false otherwise.
// The single-key form is sent once, in the same call: it names one key, so
// that the cluster serves it (or redirects it with ASK) whatever the
// migration's state.
func narrowed(c Command, err error) (Command, bool) {
	if c.Script == nil || c.Script.SingleKey == nil || len(c.Keys) < 2 || err == nil || !redis.HasErrorPrefix(err, "TRYAGAIN") {
		return Command{}, false
	}
	one := c.Script.SingleKey(c)
	one.Args = nil // its own wire form, not c's
	return one, len(one.Keys) == 1
}

// sendPaired is the send of a command that needs company on its own
// connection: the WAIT (w), which covers only the writes before it on its
// connection, and the rider's commands (guarded), which must follow the
// command to vouch for the memory it found. Both go with c as one
// pipeline: a script as EVALSHA (EVAL while its digest is unknown), then
// with EVAL (and a second WAIT) after NOSCRIPT, and in its single-key
// form after TRYAGAIN (narrowed); each resend's WAIT has what is left of
// the call's time. On a Redis Cluster node the pipeline goes to the master of c's
// slot and follows its MOVED and ASK redirections itself (see
// clusterRoute), since it bypasses the ClusterClient's own.
func (d *Direct[R]) sendPaired(ctx context.Context, c Command, w *Wait, guarded bool) Reply {
	switch d.node.(type) {
	case *redis.Client, *redis.ClusterClient:
	default: // no WAIT here: the coordinator requires one of those for it (CanWait)
		return d.sendInTurn(ctx, c)
	}
	route, err := d.routeFor(ctx, c.Key)
	if err != nil {
		return failed(ctx, err)
	}
	var waitArgs []any
	suspect := false // a NOSCRIPT: the node's script cache is new, and scripts go as EVAL
	for resend := false; ; resend = true {
		args := c.Args
		if c.Script != nil {
			args = c.WireFor(d.names.Of(c.Script.Script))
		}
		if suspect {
			args = append([]any{"eval", c.Script.Src}, args[2:]...)
		}
		if w != nil {
			waitArgs = w.args
			if resend {
				waitArgs = w.within(ctx) // what is left of the call's time
			}
		}
		pipe := route.conn.Pipeline()
		if route.asking {
			_ = pipe.Process(ctx, redis.NewStatusCmd(ctx, "asking"))
		}
		cmd := redis.NewCmd(ctx, args...)
		_ = pipe.Process(ctx, cmd)
		var ride R
		if guarded {
			ride = d.rider.Board(ctx, c.Key)
			cmds := d.riders.Get().(*[]redis.Cmder)
			*cmds = d.rider.AppendTo(ride, (*cmds)[:0])
			for _, c := range *cmds {
				_ = pipe.Process(ctx, c)
			}
			clear(*cmds)
			d.riders.Put(cmds)
		}
		var wait *redis.Cmd
		if w != nil {
			wait = redis.NewCmd(ctx, waitArgs...)
			_ = pipe.Process(ctx, wait)
		}
		sent := time.Now()
		exec(ctx, pipe)
		received := time.Now()
		if c.Script != nil && !suspect && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			suspect = true
			continue
		}
		if route.follow(ctx, cmd.Err()) {
			continue
		}
		if one, ok := narrowed(c, cmd.Err()); ok {
			c = one
			continue
		}
		r := Reply{Cmd: cmd}
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) { // nil is SET's grant
			if guarded && redis.HasErrorPrefix(err, "READONLY") {
				d.rider.Demoted()
			}
			return r // the command's own error decides
		}
		if w != nil {
			r.NotReplicated = w.Verdict(wait)
		}
		if guarded {
			r.Verdict = d.rider.Judge(ctx, d.node, ride, Trip{Sent: sent, Received: received, Suspect: suspect})
		}
		return r
	}
}

// sendInTurn is sendPaired for a Node that cannot pipeline (a wrapper that
// offers only Do and the script calls): the rider's commands follow the
// command's reply, so that they cost one more round trip.
func (d *Direct[R]) sendInTurn(ctx context.Context, c Command) Reply {
	sent := time.Now()
	cmd := d.send(ctx, c)
	if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return Reply{Cmd: cmd}
	}
	ride := d.rider.Board(ctx, c.Key)
	d.rider.AskApart(ctx, d.node, ride)
	return Reply{Cmd: cmd, Verdict: d.rider.Judge(ctx, d.node, ride, Trip{Sent: sent, Received: time.Now()})}
}
