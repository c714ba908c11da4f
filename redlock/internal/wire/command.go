package wire

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/luascript"
)

// Node is what the transport needs of a node's client: scripts and plain
// commands (redlock.Node is the same interface).
type Node interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Script is a Lua script with its source, which the transport sends in
// full (EVAL) until a server has named its digest, and again when a node
// answers EVALSHA with NOSCRIPT, and what an error says of it.
//
// Its digest is learned from each node, never computed (see
// internal/luascript: Go's FIPS 140-3 "only" mode forbids SHA-1 in the
// client): Warm records what SCRIPT LOAD answers on every node, and
// otherwise a Link's first use of the script loads it in the background
// (Submit). A node gets the script by a digest only where it named that
// digest itself (Link.Names), so that a node that names a script otherwise
// cannot have another node run another script.
type Script struct {
	*luascript.Script        // Src, Digest (the one most nodes named), Trust
	Name              string // as errors name it: "the release script"
	Calls             string // the commands it calls, which the node's ACL must allow
	// SingleKey, if set, returns a command of the script in the form that
	// names only its first key, and decides nothing the other keys would
	// have to be read for. Why: a Redis Cluster refuses a command naming
	// several keys with TRYAGAIN while their slot migrates and the node
	// holds only some of them, and a lease's key nearly always stands
	// without its revocation tombstone (see redlock's Revoke), so that a
	// held lease could not be checked or extended for the whole of a
	// migration. The direct transport (every cluster node's) sends this
	// form in the same call when it meets that TRYAGAIN (see
	// Direct.narrowed).
	SingleKey func(Command) Command
}

// NewScript wraps src once. It computes nothing: its digest is learned
// from a server (see Script).
func NewScript(name, calls, src string) *Script {
	return &Script{Script: luascript.New(src), Name: name, Calls: calls}
}

// Command is what the coordinator sends to one node: a plain command, or a
// script with its keys and arguments.
type Command struct {
	Key string // the first key, whose order the pipeline keeps (see OrderKeys)
	// Args are a plain command's arguments; for a script, its wire form
	// (EVALSHA, or EVAL while its digest is unknown) once Bound, nil
	// before.
	Args   []any
	Script *Script
	Keys   []string
	Argv   []any
	Lease  string // the value of the lease it acts for, where it matters (see Role)
	Role   Role
	// Replicate: the WAIT that follows it (Pipeline.Wait, Direct.Wait)
	// judges its grant. Acquisitions, extensions and fencing phase 2.
	Replicate bool
	// Guarded: the transport's Rider (the node guard) judges its reply.
	// Acquisitions, extensions and checks.
	Guarded bool
	// OrderKeys is how many of Keys, from the first, the command keeps its
	// order against: a multi-key lease's lock keys, which it must not
	// overtake on any of them (its script's other keys, such as tombstones
	// or counters, are not ordered). 0 means Key alone, as for every
	// single-key command. The coordinator keeps it within len(Keys).
	OrderKeys uint8
	// Command stays within 128 bytes: the direct transport's go statement
	// copies it into the goroutine; a larger one costs an allocation more
	// per call. (It is 120: OrderKeys sits in the padding after the bools;
	// TestSizesKeepTheirBounds checks it.)
}

// Role tells the pipeline which commands of one lease may be withdrawn
// before they are sent (see Pipeline), and which run again after the
// commands before them.
type Role uint8

const (
	RoleOther    Role = iota
	RoleSets          // puts the lease's value on the node (an acquisition)
	RoleFences        // fencing phase 2, which follows RoleSets
	RoleReleases      // deletes the lease's value; it replies 1 (or 2) when it did
	RoleExtends       // extends the lease, and may set its value again (healing)
)

// ScriptCommand runs s on keys with argv.
func ScriptCommand(s *Script, keys []string, argv ...any) Command {
	return Command{Key: keys[0], Script: s, Keys: keys, Argv: argv}
}

// Of marks c as acting for the lease with value, in role r.
func (c Command) Of(value string, r Role) Command {
	c.Lease, c.Role = value, r
	return c
}

// Replicated marks c as a write whose grant the WAIT judges.
func (c Command) Replicated() Command {
	c.Replicate = true
	return c
}

// GuardedBy marks c as a command whose reply the Rider judges.
func (c Command) GuardedBy() Command {
	c.Guarded = true
	return c
}

// Across marks c as ordered against its first n keys (see OrderKeys): a
// multi-key lease's command, whose first n keys are its lock keys. It
// panics if c has fewer than n keys, or n does not fit OrderKeys: a
// coordinator's mistake, caught where the command is built.
func (c Command) Across(n int) Command {
	if n < 0 || n > len(c.Keys) || n > math.MaxUint8 {
		panic(fmt.Sprintf("wire: a command ordered against %d of its %d keys", n, len(c.Keys)))
	}
	c.OrderKeys = uint8(n)
	return c
}

// OrderedBy returns the keys c keeps its order against, Key first; nil
// when it is Key alone (OrderKeys 0).
func (c Command) OrderedBy() []string {
	if c.OrderKeys == 0 {
		return nil
	}
	return c.Keys[:c.OrderKeys]
}

// Bind computes c's wire form once (Wire), so that every node's pipeline
// shares it instead of building its own.
func (c Command) Bind() Command { return c.BindBy(c.digest()) }

// BindBy computes c's wire form once, by digest (EVALSHA; EVAL with the
// source where digest is ""), so that every node's pipeline shares it
// instead of building its own: call it before submitting c to several
// pipelines, with the digest most of them named (see WireFor).
func (c Command) BindBy(digest string) Command {
	if c.Script != nil && c.Args == nil {
		c.Args = c.form(digest)
	}
	return c
}

// digest is c's script's trusted digest (luascript.Script.Trust), "" for
// none or no script.
func (c Command) digest() string {
	if c.Script == nil {
		return ""
	}
	return c.Script.Digest()
}

// Name is c's command name as go-redis gives a command's, in lower case:
// "evalsha" for a script, whichever form it goes in (EVAL while its
// digest is unknown, or in a resend after NOSCRIPT).
func (c Command) Name() string {
	if c.Script != nil {
		return "evalsha"
	}
	if len(c.Args) == 0 {
		return ""
	}
	name, _ := c.Args[0].(string)
	return strings.ToLower(name)
}

// Wire is the command's form as bound (Bind, BindBy), or else by its
// script's trusted digest (EVALSHA), or with its source (EVAL). Every
// node's command shares a bound form, which nothing writes; a node sends
// it as is only where it named that digest itself (WireFor).
func (c Command) Wire() []any {
	if c.Script == nil || c.Args != nil {
		return c.Args
	}
	return c.form(c.digest())
}

// form is c's script command by digest (EVALSHA), or with its source
// (EVAL) where digest is "".
func (c Command) form(digest string) []any {
	a := make([]any, 0, 3+len(c.Keys)+len(c.Argv))
	if digest != "" {
		a = append(a, "evalsha", digest, len(c.Keys))
	} else {
		a = append(a, "eval", c.Script.Src, len(c.Keys))
	}
	for _, k := range c.Keys {
		a = append(a, k)
	}
	return append(a, c.Argv...)
}

// WireFor is the command as a node sends it that named the digest named
// for its script ("" where it named none; see luascript.Names.Of). An
// unbound command is built for the node: by that digest, or with the
// source. A bound one is sent as it is where it goes as EVAL or by this
// very digest, and otherwise in a form of its own with the script's source
// (EVAL), which the node runs as sent (one round trip on any node, where
// EVALSHA would meet NOSCRIPT on a node that never ran it, or run what a
// digest another node named names here). The steady state, where every
// node named the digest the command was bound by, shares the slice and
// allocates nothing.
func (c Command) WireFor(named string) []any {
	if c.Script == nil {
		return c.Args
	}
	if c.Args == nil {
		return c.form(named)
	}
	w := c.Args
	if len(w) < 2 || w[0] == "eval" || (named != "" && w[1] == named) {
		return w
	}
	a := make([]any, 0, len(w))
	a = append(a, "eval", c.Script.Src)
	return append(a, w[2:]...)
}

// source is the script's source, or "" for a plain command.
func (c Command) source() string {
	if c.Script == nil {
		return ""
	}
	return c.Script.Src
}

// ReadsRaw reports whether c's reply is read raw: a plain command (not a
// script) that answers nil on success, which is an acquisition's SET (see
// rawreply.go).
func (c Command) ReadsRaw() bool {
	return c.Script == nil && c.Role == RoleSets
}

// Describe names c for an error.
func (c Command) Describe() string {
	if c.Script == nil {
		name, _ := c.Args[0].(string)
		return fmt.Sprintf("%s on %q", strings.ToUpper(name), c.Key)
	}
	return fmt.Sprintf("the %s script on %q (EVALSHA, or EVAL; it calls %s on %s)",
		c.Script.Name, c.Key, c.Script.Calls, strings.Join(c.Keys, " and "))
}

// Reply is what one node answered to one command, with the verdicts of what
// rode with it. The coordinator turns it into the node's vote, in one place
// for both transports: a verdict that is not nil takes back a grant, and
// never makes a refusal out of one.
type Reply struct {
	Cmd *redis.Cmd // the command's reply (or the error that it got none)
	// NotReplicated is the WAIT's verdict on a Replicate command: nil when
	// the write was acknowledged as asked (or nothing was waited for).
	NotReplicated error
	// Verdict is the Rider's verdict on a Guarded command: nil when it
	// passed (or nothing judged it).
	Verdict error
	// RTT is the call's round trip, where the transport timed it per call
	// (the direct transport); 0 otherwise (the pipeline times batches: see
	// Pipeline.OnTrip).
	RTT time.Duration
	// Received is when the call came back (its reply read, or its
	// failure met) where the transport read its clock then: for a
	// pipeline's batch, when the batch came back (after any command ran
	// again). Zero where it did not (a call refused before it was sent).
	// Events time each node's reply with it: no clock reading of their own.
	Received time.Time
	// Uncounted: the transport refused or skipped the call before queuing
	// it (Send.Skip, a full or stalled pipeline), so that its failure is
	// not counted against the node's recent record.
	Uncounted bool
}

// failed is the reply of a call that got no reply: err says why.
func failed(ctx context.Context, err error) Reply {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return Reply{Cmd: cmd}
}

// A Receiver gets every command's reply, exactly once per submitted call:
// node is the node's index given to Submit. Receive must not block; the
// pipeline calls it from its senders, sometimes with its lock held.
type Receiver interface {
	Receive(node int, r Reply)
}

// Send says how one call goes, beyond its command.
type Send struct {
	// Timeout bounds the call: the pipeline's batch carrying it may take
	// this long, and a direct call's context ends this long after it is
	// sent. The coordinator's vote is bounded separately.
	Timeout time.Duration
	// After: the direct transport sends only once After's call on the same
	// node has returned (the call this one must not overtake: a release
	// behind its own SET). It asks from the call's goroutine, when it is
	// about to send, not when the call is submitted. The pipeline keeps
	// order per key itself and ignores it.
	After Settler
	// Skip, if set, says whether the command is not to be sent, and why:
	// the direct transport asks once After is closed, the pipeline when the
	// command is queued. Its error is the call's.
	Skip func(node int) error
	// Await: the direct transport waits, within Timeout, for it to close
	// before sending (an earlier release of the key on the node; for a
	// release, the calls that may set its lease's value there).
	Await <-chan struct{}
	// Finish, if set, is called once a direct call returned, before its
	// reply is delivered.
	Finish func()
}

// Settler is a set of earlier calls, one per node, each of which says when
// it has returned: a coordinator's round (quorum.Round satisfies it).
type Settler interface {
	Settled(node int) <-chan struct{}
}

// Link is one node's transport: a Pipeline or a Direct.
type Link interface {
	// Submit sends c and delivers its reply, once, to to.Receive(node, ...).
	// It never blocks on the node.
	Submit(ctx context.Context, c Command, s Send, to Receiver, node int)
	// Names are the digests the node named for scripts: a script goes to
	// it by digest (EVALSHA) only where it named that digest itself.
	Names() *luascript.Names
}

// ErrNodeBusy fails a call that the transport refused: too many calls
// outstanding on a node that is not answering.
var ErrNodeBusy = errors.New("redlock: too many calls outstanding on the node (it is not answering)")

// ErrNodeTimeout is the error of a call that ran out of its own time
// (Send.Timeout). It deliberately does not match context.DeadlineExceeded,
// which callers read as their own deadline.
var ErrNodeTimeout = errors.New("redlock: no reply from the node in time")

// nodeTimeout is err, a call's own deadline, as ErrNodeTimeout.
func nodeTimeout(d time.Duration, err error) error {
	return fmt.Errorf("%w (%v): %v", ErrNodeTimeout, d, err)
}

// ErrHookExited is the error of a call whose transport goroutine a hook
// ended (runtime.Goexit: a go-redis hook on the node's client, or the
// round-trip hook, that called t.FailNow or the like) before its reply was
// read: it is answered as failed, never as a reply it did not get.
var ErrHookExited = errors.New("redlock: a hook ended the transport's goroutine (runtime.Goexit) before the reply was read")

// ErrWithdrawn is the error of an acquisition's command that its own
// release withdrew before it was sent.
var ErrWithdrawn = errors.New("redlock: withdrawn unsent: released before it reached the node")

// exec runs pipe, and makes its error every command's where go-redis left
// the commands without one: a failure to set up the connection (AUTH or
// HELLO refused, a dial that failed) comes back from Exec alone, and the
// commands would read as answered with nothing (a nil value, no error).
func exec(ctx context.Context, pipe redis.Pipeliner) {
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return // the commands carry their own errors
		}
	}
	for _, c := range cmds {
		c.SetErr(err)
	}
}
