// Package wire is the coordinator's transport to one Redis node: it sends
// commands and hands their replies back. It owns the auto-pipeline (queues,
// batches, senders, raw reads of acquisitions' replies, reruns after
// NOSCRIPT), the direct transport (a goroutine per call), the placement of
// WAIT and WAITAOF, and a Redis Cluster node's redirections.
//
// It imports go-redis and internal/reply, never the coordinator (redlock)
// nor the node guard: it knows what a command is, not what a lock is.
//
// # The contract
//
//   - A Command is what goes to one node: a plain command or a Script,
//     with the keys whose order it keeps (Key, or the first OrderKeys of a
//     multi-key lease's Keys), the lease it acts for and its Role
//     (which commands of a lease a release may withdraw unsent, and which
//     run again after the commands before them). Bind computes its wire
//     form once for every node.
//   - A Script goes as EVAL with its source until a server has named its
//     digest, then as EVALSHA: the client computes no SHA-1 (Go's FIPS
//     140-3 "only" mode forbids it). A Link's first use of a script
//     learns its digest in the background (one SCRIPT LOAD per script per
//     process, which names no key and is never queued); the form of each
//     call is decided when it is submitted.
//   - A Link (a Pipeline or a Direct) takes a Command with a Send (its
//     timeout, and for the direct transport, which keeps no order, what to
//     wait for first) and a Receiver, and delivers exactly one Reply to
//     Receiver.Receive(node, reply) per submitted call, never blocking on
//     the node. A call the transport cannot send gets a Reply whose Cmd
//     holds the reason (ErrNodeBusy, ErrWithdrawn, ErrNodeTimeout, Skip's
//     error).
//   - What rides with a command, and judges it: a command marked
//     Replicate is followed on its connection by the Link's WAIT, whose
//     verdict is Reply.NotReplicated; a command marked Guarded is followed
//     by its Rider's commands (the node guard's companions: Rider.Board,
//     Rider.AppendTo), once per batch, and the Rider's verdict on them
//     (Rider.Judge) is Reply.Verdict. The transport never decides a vote:
//     the coordinator turns a Reply into one, in one place for both
//     transports (redlock's vote.go).
//
// # The invariants
//
// Order per key: commands on one key reach the node in the order they
// were submitted to its Pipeline, and a command that names several keys
// (OrderKeys: a multi-key lease's) is ordered so against each of them,
// against other such commands and single-key commands on any of them
// alike. The Direct keeps no order itself: the coordinator names in
// Send.After and Send.Await what a call must not overtake, on each key it
// names. A release is the last word of its lease on the node: once it
// ran, or was taken as done (withdrawn with the SET it follows), no
// command of that lease sets its key there again, however commands are
// queued, withdrawn and run again (Pipeline states how;
// TestPipelineReleaseIsLastUnderRandomSchedules checks it under random
// schedules). Every command the coordinator sends may run twice (a rerun
// after NOSCRIPT or an error read raw): each is idempotent.
package wire
