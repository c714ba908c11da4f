package guard

import (
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/redlock/internal/reply"
)

// The failover rule: a node whose memory came from another replication
// history than the one the guard examined is judged by that history, never
// by the age of its process.
//
// Redis replicates asynchronously. A replica promoted after its primary
// died may lack the primary's last grants, whether its process started a
// minute ago or a month ago; such a node could grant a held lock a second
// time, exactly like a restart without persistence. So the marker records
// the replication history it was examined in (the node's master_replid,
// and the bytes its process had read from a primary), and a node that now
// answers from another history (a promoted replica, a primary that came
// back as a replica and resynced) is a node whose memory began when the
// guard first saw the change: quarantined for MaxTTL (see examine.lua).
//
// Unless the grants are known to have reached it. The marker also records
// the fewest replicas any Locker waited for in that history
// (Options.WaitReplicas, the least any examining Locker declared) and the
// most replicas the node had at an examination in it. A history in which
// every Locker waited for at least as many replicas as the node ever had
// (wait >= replicas > 0) is covered: each grant reached every replica, so
// a promoted one holds them all, and the guard lets it in at once.
//
// Keeping that word true costs two things, both on the marker's side:
//
//   - A Locker whose WaitReplicas is below the marker's word takes it back
//     at its first examination (the marker keeps the least). Its first
//     grant went to the node before that examination, and a replica may
//     lack both; so the examination that weakens the word fails the votes
//     of the round trip that ran it (errWeakened), and the next counts.
//   - A replica may join after the examination. A Locker that waits for
//     replicas sends INFO replication with its guarded batches while the
//     word holds (the replication companion): when the node has more
//     replicas than the marker recorded, or its history was renamed (a
//     master's replid changes when its first replica arrives), the guard
//     examines again before the votes count.
//
// A Locker that waits for no replica never sends it, and its marker is
// never covered: every failover is then followed by a quarantine of
// MaxTTL. On a Redis Cluster, a slot migration brings a marker from another
// master with the slot's keys, which MIGRATE does not wait to replicate: a
// migrated slot's history is never covered.
//
// What the rule cannot see: a replica that was disconnected when a grant
// was acknowledged (WAIT counts the replicas that answered) and is promoted
// before it catches up. Sentinel and Redis Cluster avoid replicas that have
// long been disconnected, not ones that were for a moment.

// history is a marker's replication history: the node's master_replid
// when it was written ("?": the server did not say), the fewest replicas a
// Locker waited for, and the most the node had at an examination.
type history struct {
	replid         string
	wait, replicas int
}

// covered reports whether every grant in the history reached every replica
// the node had: a failover to one of them is let in without a quarantine.
func (h history) covered() bool {
	return h.replid != "" && h.replid != "?" && h.wait > 0 && h.wait >= h.replicas
}

func parseHistory(replid, wait, replicas string) (history, error) {
	w, err1 := strconv.Atoi(wait)
	r, err2 := strconv.Atoi(replicas)
	if err1 != nil || err2 != nil || w < 0 || r < 0 {
		return history{}, fmt.Errorf("replicas waited for %q and replicas seen %q are not counts", wait, replicas)
	}
	return history{replid: replid, wait: w, replicas: r}, nil
}

// replicationInfoArgs is the replication companion: shared, never written.
var replicationInfoArgs = []any{"info", "replication"}

// changedIn reads the replication companion: whether the node's history
// or its replicas changed since the examination (its replid is another,
// or it has more replicas than the marker recorded), so that the marker's
// word must be examined again before the votes count. It is cheap: two
// substring searches in a reply of a few hundred bytes.
func (h history) changedIn(cmd *redis.StringCmd) (bool, error) {
	info, err := cmd.Result()
	if err != nil {
		const what = "INFO replication (the guard's check that every replica is waited for)"
		if reply.DeniedByACL(err) {
			return false, reply.Denied(what, err)
		}
		return false, fmt.Errorf("redlock: %s: %w", what, err)
	}
	replid, ok := reply.InfoField(info, "master_replid:")
	if !ok || replid != h.replid {
		return true, nil
	}
	count, ok := reply.InfoField(info, "connected_slaves:")
	if !ok {
		return true, nil
	}
	n, err := strconv.Atoi(count)
	return err != nil || n > h.replicas, nil
}

// errWeakened fails the votes of a round trip whose examination took back
// the marker's word that every grant reaches every replica.
var errWeakened error = &QuarantineError{Cause: weakenedCause}

const weakenedCause = "the examination that ran with it found that grants on this node no longer reach every replica (a Locker with a lower WaitReplicas, or more replicas than are waited for), and this round trip's grant may have gone before that word, to replicas that lack both; the next round trip counts"
