package redlock

import (
	"fmt"
	"time"

	"github.com/redlock/redlock/clock"
	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/internal/unsafelocker"
	"github.com/redlock/redlock/redlock/internal/guard"
)

// Options configures a Locker. The zero value of every field means its
// default, and a nil *Options means all defaults. New copies the options;
// later changes to the caller's struct have no effect.
type Options struct {
	// DriftFactor is the part of the TTL set aside for clocks that run at
	// different rates. Default 0.01; must be in [0, 1).
	DriftFactor float64

	// DriftFixed is added to the drift allowance for Redis's 1 ms expiry
	// precision and a minimum drift. Default 2ms; must not be negative.
	DriftFixed time.Duration

	// NodeTimeout bounds how long one attempt waits for a node that its
	// peers outran: a node that has not answered by then, while others
	// answered in its first half, counts as failed. It should be small
	// against the TTL (the Redis documentation suggests 5-50 ms for a 10 s
	// TTL) so that a dead node cannot eat the lease's validity.
	// Default 50ms; must not be negative.
	//
	// Where every node misses it together, or the latest reply came in its
	// second half, the stall is most likely this process's (scheduling,
	// GC), not the nodes': the round then waits on, giving the nodes still
	// out NodeTimeout from the latest reply; and where the round's own
	// timer fires late by more than an eighth of NodeTimeout (this process
	// was not running), it gives them as long again as it was late. Both
	// up to StallAfter (ten NodeTimeouts, at least 500ms) and never past
	// the validity it can spend (Event.Stalled; ErrClientStalled where
	// none answered). Unlock
	// waits as long as the lease had validity left, within the same
	// bounds. Validity still counts from before the first send.
	//
	// It is enforced by the coordinator, not by the client library, so it
	// holds for clients built without ContextTimeoutEnabled too.
	NodeTimeout time.Duration

	// RetryDelay is the least time Lock waits between attempts.
	// Default 25ms; must not be negative.
	RetryDelay time.Duration

	// RetryJitter is the width of the random extra delay Lock adds to
	// RetryDelay, so that contending clients fall out of step: each wait is
	// drawn uniformly from [RetryDelay, RetryDelay+RetryJitter).
	// Default 50ms; must not be negative.
	RetryJitter time.Duration

	// Clock is read to time acquisitions and leases. Default clock.System{}.
	Clock clock.Clock

	// Fencing makes every acquisition issue a fencing token (Lease.Token),
	// monotonic per key across the nodes, at the cost of a heavier script,
	// and of a second round trip where the counters of the nodes that decided
	// disagree (none on Extend or Unlock). It keeps a permanent counter key
	// per lock name on every node. At most 256 nodes.
	Fencing bool

	// MaxTTL is the longest TTL a lease may ask for: TryLock, Lock, Extend
	// and Do refuse a TTL above it with an error that names both. Every key
	// this library sets then expires within MaxTTL of its last write, which
	// is what lets a node that forgot its keys (a restart without
	// persistence, a flush) rejoin safely once MaxTTL has passed: the
	// Redis documentation's delayed restart (see docs/failure-models.md).
	// The node guard quarantines for the longest MaxTTL any Locker
	// declared on its nodes (their markers carry it); a node that forgot
	// its memory forgot that too, so give every Locker of a deployment the
	// same value. Default 1 minute; must not be negative nor above
	// MaxTTLLimit (a day): a quarantine lasts MaxTTL, so "no limit" is not a
	// setting the guard could keep.
	MaxTTL time.Duration

	// NoQuarantine turns the node guard off (see Locker.TrustNodes and
	// docs/failure-models.md): votes count from a node whose memory began
	// less than MaxTTL ago (a restart without persistence, a flush, a first
	// use), and from one whose clock jumped forward less than MaxTTL ago, as
	// with every other Redlock client. Nodes' clocks are then not measured
	// either (Health reports no readings), the guard's companions (PTTL or
	// GET of its marker, TIME, SCRIPT EXISTS) are not sent, and New adds no
	// dial hook to the nodes' clients.
	NoQuarantine bool

	// NoHeal turns healing off: Extend (and Do's extensions) then only
	// extends the key where it still holds this lease's value. With
	// healing, Extend also sets the key again, with the lease's value and
	// the new TTL, on nodes where it is missing (a node restarted without
	// persistence, a failover to a replica that never got it; never over
	// another value), so that a long lease regains the nodes that forgot it
	// instead of ending once a bare majority is left. A healed node in the
	// node guard's quarantine does not count until the quarantine ends.
	// Lease.Holders reports how many nodes hold the lease.
	NoHeal bool

	// MaxHold bounds how long Do keeps extending a lease: once another
	// extension would carry it past MaxHold since it was acquired, Do stops
	// extending and the lease runs out. Zero means no bound; must not be
	// negative.
	MaxHold time.Duration

	// RequireDurable refuses fenced acquisitions (ErrNotDurable) while a
	// majority of nodes would not keep their counters across a crash (see
	// Locker.Durability). The nodes' verdict is trusted for 10s; a check that
	// the caller's deadline or the network cut short decides nothing and is
	// not remembered (the attempt fails with that error, and Lock retries).
	// Lock returns ErrNotDurable at once. Needs CONFIG GET permission.
	RequireDurable bool

	// NoAutoPipeline sends each command to a *redis.Client node on its own
	// pooled connection, from a goroutine per call, as go-redis does by
	// default. Without it, New gives each *redis.Client node one sender that
	// pipelines whatever commands are waiting (auto-pipelining): in order,
	// with a bounded queue, and far fewer system calls under concurrency.
	// Other Node types (ClusterClient, Ring, wrappers) are never pipelined.
	NoAutoPipeline bool

	// NoWakeUps turns off release notices: Lock then hears of a release by
	// another Locker (another process) only at its next poll, RetryDelay
	// later. With them (the default), each release publishes the released
	// value on the key's release channel (SPUBLISH where the server has
	// it, else PUBLISH; never failing the release), and a Locker whose Lock
	// waits for a key listens there, on one subscriber connection per node
	// (per shard of a Redis Cluster node), kept only while some Lock waits.
	// A notice only wakes the waiter early: it still wins by the quorum,
	// and still polls (pub/sub loses messages over a reconnect, and an
	// expired key publishes nothing). Nodes that are not go-redis clients
	// (wrappers) are polled only.
	NoWakeUps bool

	// WaitReplicas makes a node's grant count only once that many of its
	// replicas acknowledged it: acquisitions, extensions and both fencing
	// phases are followed, on the same connection, by WAIT WaitReplicas
	// (NodeTimeout/2, at least 1 ms). A node whose replicas fall short votes
	// failed with ErrNotReplicated. It narrows the window in which a
	// failover to a replica that never received the lock grants it twice; it
	// does not close it (see docs/failure-models.md). Releases and Check send
	// no WAIT. Needs *redis.Client or *redis.ClusterClient nodes.
	//
	// The node guard quarantines a promoted replica for MaxTTL unless every
	// guarded Locker's WaitReplicas is at least the number of replicas the
	// node had (see internal/guard/failover.go): give every Locker of a deployment the
	// same value, and no fewer than the replicas each node has, or expect
	// MaxTTL without the node after each failover.
	// Default 0: no WAIT; must not be negative.
	WaitReplicas int

	// WaitAOF sends WAITAOF 1 WaitReplicas instead of WAIT: the node's own
	// AOF fsync, and WaitReplicas replicas' fsyncs, must be acknowledged. A
	// node without WAITAOF (before Redis 7.2) or with appendonly no fails its
	// vote with an error that says so; there is no silent downgrade.
	//
	// Cost, measured on Redis 8.0.2 and Valkey 8.1.1: the node's own fsync
	// (WaitReplicas 0) adds little, but a replica reports its fsyncs only
	// with its once-a-second acknowledgement, so with WaitReplicas >= 1 each
	// WAITAOF answers after up to a second. Give NodeTimeout at least 2.5 s
	// then (the WAITAOF timeout is half of it), and a TTL to match.
	WaitAOF bool

	// Observer, if set, is told of every decision and background event
	// (see Observer and Event): each attempt, extension, unlock, check and
	// revocation with every node's outcome and latency, releases after
	// failed attempts, late grants, leases lost under Do, quarantines and
	// clock alarms. It must not block. NewLogObserver logs them with
	// log/slog; the nested module github.com/redlock/redlock/otel records
	// OpenTelemetry metrics and spans. Default nil: nothing is observed,
	// at no cost.
	Observer Observer

	// Owner labels this Locker's leases: it is carried in every lock value
	// it sets (owner and 128 random bits: see Lease.Value), so that
	// Inspect, and anyone reading the key on a node, can tell who holds a
	// lock. Name the host and process, say "billing-7f9c/pid 4121". At
	// most MaxOwnerLen bytes of printable ASCII (no spaces at either end,
	// no '|'). Leases of Lockers without an Owner, and of other Owners,
	// exclude each other as always: only the random part makes a value
	// unique. Default "": values carry no label.
	Owner string

	// unsafe are the steps of the algorithm the simulator's negative
	// controls and the package's tests skip, and its tests' points to act
	// (internal/unsafelocker); zero everywhere else.
	unsafe unsafelocker.Hooks
}

// The simulator's controls set Options.unsafe through internal/unsafelocker,
// which cannot import this package.
func init() {
	unsafelocker.Register(func(opts any, h unsafelocker.Hooks) { opts.(*Options).unsafe = h })
}

// Defaults for Options.
const (
	DefaultDriftFactor = 0.01
	DefaultDriftFixed  = 2 * time.Millisecond
	DefaultNodeTimeout = 50 * time.Millisecond
	DefaultRetryDelay  = 25 * time.Millisecond
	DefaultRetryJitter = 50 * time.Millisecond
	DefaultMaxTTL      = time.Minute
)

// MaxTTLLimit is the largest Options.MaxTTL New accepts, and the longest
// quarantine a node's marker can ask of any Locker (a longer MaxTTL read
// from a marker counts as MaxTTLLimit: never less than what was declared
// within range, never the overflow that a setting meant as "no limit" would
// be). A lease that must last longer is extended (Do, Extend), which keeps
// each TTL short and the quarantine after a node's restart short with it.
const MaxTTLLimit = guard.MaxTTLLimit

// withDefaults returns a copy of o with defaults applied, or an error naming
// the first invalid field.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"DriftFixed", c.DriftFixed},
		{"NodeTimeout", c.NodeTimeout},
		{"RetryDelay", c.RetryDelay},
		{"RetryJitter", c.RetryJitter},
		{"MaxHold", c.MaxHold},
		{"MaxTTL", c.MaxTTL},
	} {
		if f.v < 0 {
			return Options{}, fmt.Errorf("redlock: Options.%s is %v; it must not be negative", f.name, f.v)
		}
	}
	if c.MaxTTL > MaxTTLLimit {
		return Options{}, fmt.Errorf("redlock: Options.MaxTTL is %v; it must not be above MaxTTLLimit (%v): a quarantine lasts MaxTTL", c.MaxTTL, MaxTTLLimit)
	}
	if err := checkOwner(c.Owner); err != nil {
		return Options{}, err
	}
	if c.WaitReplicas < 0 {
		return Options{}, fmt.Errorf("redlock: Options.WaitReplicas is %d; it must not be negative", c.WaitReplicas)
	}
	if c.DriftFactor == 0 {
		c.DriftFactor = DefaultDriftFactor
	}
	if c.DriftFixed == 0 {
		c.DriftFixed = DefaultDriftFixed
	}
	if err := c.bound().Validate(); err != nil {
		return Options{}, fmt.Errorf("redlock: Options.DriftFactor: %w", err)
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = DefaultNodeTimeout
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = DefaultRetryDelay
	}
	if c.RetryJitter == 0 {
		c.RetryJitter = DefaultRetryJitter
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = DefaultMaxTTL
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	return c, nil
}

func (o *Options) bound() drift.Bound {
	return drift.Bound{Factor: o.DriftFactor, Fixed: o.DriftFixed}
}
