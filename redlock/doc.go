// Package redlock is a distributed lock across N independent Redis masters
// (the Redlock algorithm), built to stay honest when nodes hang, fail,
// answer late, or a client's call is retried.
//
// A Locker holds the nodes. TryLock makes one attempt: it sends
// SET key value NX PX ttl GET to every node in parallel with a fresh 128-bit
// random value, and wins when a majority (N/2+1) granted and some validity is
// left: ttl - elapsed - drift, elapsed measured on the monotonic clock from
// before the first send. The decision is made as soon as the replies allow, so
// one hung node costs nothing; a node that has not answered within
// Options.NodeTimeout counts as failed. Lock tries until it wins or the
// context ends: a Locker's Lock calls for one key take turns in arrival
// order, and Lockers in other processes hear releases through notices and
// take turns by a line kept on the nodes (polling is the fallback).
//
// # The shapes of use
//
//   - Do (Locker.Do, Lease.Do) runs a function under the lease, extending
//     it in the background and cancelling the function's context when the
//     lease is lost (see Example and the fenced SQL write in package fence).
//   - Lock with a deadline bounds the wait (ExampleLocker_Lock).
//   - TryLockMulti and LockMulti take one lease over several keys, all or
//     nothing per node, so that callers naming them in any order cannot
//     deadlock (ExampleLocker_TryLockMulti).
//   - Lease.Handle and Locker.Resume hand a lease to another process
//     (ExampleLocker_Resume).
//   - Options.Observer reports every decision (ExampleObserver); Inspect
//     and Revoke are the operator's view (ExampleLocker_Inspect).
//   - Nodes may be plain masters (Example), Sentinel-managed primaries
//     (ExampleNew_sentinel) or one Redis Cluster (ExampleNew_cluster).
//
// A failed attempt is released on every node, including nodes that failed or
// had not answered yet; a release can never overtake its own SET on a node,
// so late grants are deleted as soon as they land. Unlock does the same.
// Release and Extend compare the value in a Lua script, so a lease never
// deletes or extends another holder's lock.
//
// # How commands travel
//
// New gives each *redis.Client node an auto-pipeline: commands queued for the
// node while a batch is in flight go out together in the next pipeline, in
// order per key, so that under concurrency one write carries many lock
// operations (a lone caller's command goes out at once). Its queue is
// bounded and fails fast when the node stops answering. Other Node types,
// and Options.NoAutoPipeline, use a goroutine and a pooled connection per
// call instead. Neither needs closing.
//
// # Inside
//
// This package is the coordinator: it validates, fans a round out, turns
// each node's reply into a vote (vote.go) and decides. Beneath it,
// internal/wire carries commands to each node (the auto-pipeline, the
// direct transport, WAIT, a Redis Cluster's redirections) and
// internal/guard is the node guard, which rides with the transport and
// judges each node's memory and clock. docs/architecture.md draws the
// arrows and follows one acquisition through them.
//
// # What a lease does and does not promise
//
// A Lease is valid until Until, by this process's monotonic clock, provided
// the nodes' clocks run at about the same rate (Options.DriftFactor) and the
// nodes keep their keys (no restart without persistence, no eviction). It
// cannot stop a holder that was paused (GC, SIGSTOP, a stalled VM) past Until
// from acting as if it still held the lock: only the resource can, by
// rejecting stale fencing tokens. Treat the lock as an efficiency measure
// unless the resource checks a token.
//
// # Replicated nodes
//
// A node that is a primary with replicas can lose a grant in a failover to
// a replica that never received it. Options.WaitReplicas counts a node's
// grant only once WAIT on the same connection reports that many replicas
// (ErrNotReplicated otherwise); Options.WaitAOF waits for fsyncs instead.
// This narrows the window; it is not consensus.
//
// Requires Redis 7.0 or newer (SET with both NX and GET), or Valkey 8; CI
// runs Redis 7.0, Redis 8.0 and Valkey 8.1.
package redlock
