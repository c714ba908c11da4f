package redlock

import "github.com/redlock/redlock/redlock/internal/wire"

// ErrNotReplicated matches the vote of a node that granted (set, extended,
// or raised a fencing counter) but whose replicas did not acknowledge the
// write in time under Options.WaitReplicas, or whose AOF fsync was not
// acknowledged under Options.WaitAOF. Such a node counts as failed, never as
// contention; a key it set is released like any failed attempt's.
//
// The WAIT follows the command on the command's own connection, which only
// a *redis.Client or a *redis.ClusterClient offers (New refuses other nodes
// with WaitReplicas or WaitAOF); the transport places it (internal/wire).
var ErrNotReplicated = wire.ErrNotReplicated
