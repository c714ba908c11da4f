package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A replicated command on a Redis Cluster node cannot go through the
// ClusterClient: its WAIT has no key, so the ClusterClient would send it to
// any node, not on the command's connection. So sendReplicated sends the
// pair to the master of the key's slot itself, and must then do what the
// ClusterClient does for its own commands:
//   - MOVED (the slot has a new master: a migration finished, or a failover
//     the client has not seen): reload the slot map and resend to the
//     master the redirection names;
//   - ASK (the slot is migrating and the key is on the importing master):
//     resend to that master behind ASKING, on the same connection;
//   - a connection that fails (the master died): ask for a slot map reload,
//     so the next attempt finds the promoted replica. The vote fails now:
//     a failover takes longer than a NodeTimeout.
//
// Without this, a Locker with WaitReplicas kept a ClusterClient node failed
// for up to ten seconds (the ClusterClient's own reload interval) after a
// failover or a completed migration, and for the whole of a migration.

// clusterRoute is where a replicated command goes on one node: the node's
// own connection, or on a ClusterClient, a master of the cluster.
type clusterRoute struct {
	conn      pipeliner
	cluster   *redis.ClusterClient // nil: not a cluster node
	asking    bool                 // send ASKING first: an ASK redirection
	redirects int
}

// pipeliner is what a node needs for the direct transport's command + WAIT
// pair: a pipeline on one connection.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// routeFor returns the route for key: the node itself, or for a Redis
// Cluster, the master of key's slot as the ClusterClient knows it.
func (n node) routeFor(ctx context.Context, key string) (clusterRoute, error) {
	cc, ok := n.Node.(*redis.ClusterClient)
	if !ok {
		return clusterRoute{conn: n.Node.(pipeliner)}, nil
	}
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return clusterRoute{}, fmt.Errorf("redlock: the master for %q: %w", key, err)
	}
	return clusterRoute{conn: m, cluster: cc}, nil
}

// follow reacts to a cluster node's error: it reports true when the command
// should be resent on the route it now names (a MOVED or ASK redirection,
// at most the ClusterClient's MaxRedirects times, 0 when its options turn
// redirections off), and asks the ClusterClient to reload its slot map when
// the map looks stale.
func (r *clusterRoute) follow(ctx context.Context, err error) bool {
	if r.cluster == nil || err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	ask, addr, ok := redirection(err)
	if !ok {
		var serverErr redis.Error
		if !errors.As(err, &serverErr) || redis.HasErrorPrefix(err, "CLUSTERDOWN") {
			r.cluster.ReloadState(ctx) // a dead master, or a cluster mid-failover
		}
		return false
	}
	if r.redirects >= r.cluster.Options().MaxRedirects || ctx.Err() != nil {
		if !ask {
			r.cluster.ReloadState(ctx) // so that the next attempt goes to the new master
		}
		return false
	}
	master := clusterMasterAt(ctx, r.cluster, addr) // reloads the slot map (MOVED needs it)
	if master == nil {
		return false
	}
	r.conn, r.asking = master, ask
	r.redirects++
	return true
}

// redirection parses "MOVED <slot> <addr>" and "ASK <slot> <addr>".
func redirection(err error) (ask bool, addr string, ok bool) {
	f := strings.Fields(err.Error())
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return false, "", false
	}
	return f[0] == "ASK", f[2], true
}

// clusterMasterAt returns the ClusterClient's client for the master at addr,
// nil if the cluster has no such master. ForEachMaster reloads the slot map
// first, so a master the ClusterClient had not seen yet is found too, and
// the map is current afterwards.
func clusterMasterAt(ctx context.Context, cc *redis.ClusterClient, addr string) *redis.Client {
	found := make(chan *redis.Client, 1)
	_ = cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			select {
			case found <- c:
			default:
			}
		}
		return nil
	})
	select {
	case c := <-found:
		return c
	default:
		return nil
	}
}
