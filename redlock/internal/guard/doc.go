// Package guard is the node guard. It checks Redlock's two assumptions
// about each node on the hot path, instead of trusting the operator with
// them:
//
//   - A node does not come back having forgotten keys it granted (a restart
//     without persistence, a FLUSHALL, an RDB snapshot older than its last
//     grants). Such a node could grant a held lock a second time. The Redis
//     documentation's remedy is to keep it out of the quorum for longer than
//     the longest TTL; the guard enforces it: each node keeps a marker of
//     when its current memory began, and while less than Options.MaxTTL has
//     passed since then the node's votes do not count.
//   - A node's clock does not jump forward (Redis expires keys by its wall
//     clock, so a forward jump drops held keys early there). Every guarded
//     round trip reads the node's clock; a drift.Estimator per node turns
//     the readings into a clock rate and jumps. After a forward jump the node's
//     votes do not count for MaxTTL (its keys from before the jump may be
//     gone early); a node measured to run faster than the drift bound
//     shortens the validity of leases it grants.
//
// Such a node's vote fails with ErrNodeQuarantined, never contention.
//
// And the assumption under both, that the nodes are independent servers:
// every examination reads the run_id of the server that answered, and of
// two nodes that answer as one server, one votes; the other's votes fail
// with ErrDuplicateNode (identity.go).
//
// Cost: the commands that need the guard (acquisitions, extensions, checks)
// travel with companions in the same pipeline, behind them on the same
// connection. On a standalone Redis (7.0 on) or Valkey node there is one:
// PTTL of the marker. The marker has an absolute expiry a century or two
// ahead, random, and every write of it moves it; so its PTTL says that the
// marker is there (-2: missing), that it is the one examined (another
// expiry reads as a clock years off), and the node's clock: the expiry
// minus the PTTL, in milliseconds, the very clock by which the node expires
// keys. Elsewhere (a server that does not say its uptime, as miniredis,
// whose TTLs need not follow its TIME; one without PEXPIRETIME; a cluster
// node) the companions are GET of the marker and TIME (not on a cluster
// node). SCRIPT EXISTS joins them in every guarded batch: of the copy of
// the examine script whose run examined the marker, which only the server
// process where it ran has cached, so that a new process (which may have
// loaded an old snapshot, marker and all) is examined before its votes
// count, however the node is reached (see proof.go). The auto-pipeline sends
// one set per batch, however many commands the batch carries.
//
// The decision is the client's: the lock commands stay plain SET NX and the
// short scripts, and no Lua runs in the steady state (Lua costs a node
// several times what a SET does). The client examines a node (examine.lua:
// INFO, then the marker is written where it is missing) only when the
// companions say something changed: the marker is missing (a restart
// without persistence, a flush, an eviction, a first use) or differs from
// the one it examined last (its value, or its expiry: a clock reading that
// does not fit the node's clock so far is examined too, and the
// examination's TIME tells a jump from a rewritten marker), or the examine
// script copy that examined it is no longer cached on the node (a new
// server process, which may have loaded an old snapshot), or this Locker
// has not examined the node yet.
//
// Order matters: the companions follow the guarded commands on one
// connection, so a marker read intact after a SET proves that the memory
// the SET found had not been flushed, and a flush after the marker's read
// is the next round trip's to see.
//
// Where the marker lives: one key per node ("redlock:memory") on every node
// but a Redis Cluster, whose masters restart separately: there, one marker
// per hash slot ("redlock:memory:{tag}", in the lock key's slot), read with
// its own GET, so that a lock key whose slot is migrating needs no
// multi-key command (which the cluster refuses with TRYAGAIN mid-migration).
// A cluster node's clock is not measured: its slot's master changes with
// failovers, and so would the clock.
//
// It imports the transport's contract (internal/wire: the guard is the
// transport's Rider), internal/reply, the support packages (clock, drift,
// internal/hashtag) and go-redis; never the coordinator. Its decisions take
// the companions' replies and the clock as inputs, so they are tested
// without a server (judge_test.go), the way drift/ is.
package guard
