package wire

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock/internal/reply"
)

// A replicated command on a Redis Cluster node cannot go through the
// ClusterClient: its WAIT has no key, so the ClusterClient would send it to
// any node, not on the command's connection. So sendPaired sends the
// pair to the master of the key's slot itself, and must then do what the
// ClusterClient does for its own commands:
//   - MOVED (the slot has a new master: a migration finished, or a failover
//     the client has not seen): reload the slot map and resend to the
//     master the redirection names;
//   - ASK (the slot is migrating and the key is on the importing master):
//     resend to that master behind ASKING, on the same connection. The
//     importing master may own no slot yet (a node just added), and then
//     the ClusterClient offers no client of it: the node keeps its own
//     (outsiders), made with the ClusterClient's options;
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
	outside   *outsiders           // clients of addresses the ClusterClient does not offer
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
func (d *Direct[R]) routeFor(ctx context.Context, key string) (clusterRoute, error) {
	cc, ok := d.node.(*redis.ClusterClient)
	if !ok {
		return clusterRoute{conn: d.node.(pipeliner)}, nil
	}
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return clusterRoute{}, fmt.Errorf("redlock: the master for %q: %w", key, err)
	}
	return clusterRoute{conn: m, cluster: cc, outside: d.outside}, nil
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
	ask, addr, ok := reply.Redirection(err)
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
		if r.outside == nil {
			return false
		}
		// A master that serves no slot yet (the target of a migration
		// to a node just added), or one the slot map does not show yet.
		master = r.outside.client(r.cluster.Options(), addr)
	}
	r.conn, r.asking = master, ask
	r.redirects++
	return true
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

// outsiders are a cluster node's own clients of cluster addresses that its
// ClusterClient does not offer (go-redis has no public client by address,
// and ForEachMaster lists only masters that serve slots). At most
// maxOutsiders are kept: the oldest is closed when another is needed.
//
// Such a client is made with the ClusterClient's options (its NewClient if
// set), so it dials, authenticates and times out as the ClusterClient's
// own do; hooks added to the ClusterClient (AddHook, OnNewNode) do not see
// its commands.
type outsiders struct {
	mu      sync.Mutex
	clients map[string]*redis.Client
	order   []string // oldest first
}

const maxOutsiders = 8

func (o *outsiders) client(opt *redis.ClusterOptions, addr string) *redis.Client {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c, ok := o.clients[addr]; ok {
		return c
	}
	if o.clients == nil {
		o.clients = map[string]*redis.Client{}
	}
	if len(o.order) >= maxOutsiders {
		oldest := o.order[0]
		o.order = o.order[1:]
		_ = o.clients[oldest].Close()
		delete(o.clients, oldest)
	}
	node := clusterNodeOptions(opt, addr)
	var c *redis.Client
	if opt.NewClient != nil {
		c = opt.NewClient(node)
	} else {
		c = redis.NewClient(node)
	}
	o.clients[addr] = c
	o.order = append(o.order, addr)
	return c
}

// clusterNodeOptions are the options a ClusterClient gives its clients of
// each node (go-redis's ClusterOptions.clientOptions, which is not
// exported), for the node at addr.
func clusterNodeOptions(opt *redis.ClusterOptions, addr string) *redis.Options {
	return &redis.Options{
		Addr:       addr,
		ClientName: opt.ClientName,
		Dialer:     opt.Dialer,
		OnConnect:  opt.OnConnect,

		Protocol:                     opt.Protocol,
		Username:                     opt.Username,
		Password:                     opt.Password,
		CredentialsProvider:          opt.CredentialsProvider,
		CredentialsProviderContext:   opt.CredentialsProviderContext,
		StreamingCredentialsProvider: opt.StreamingCredentialsProvider,

		MaxRetries:      opt.MaxRetries,
		MinRetryBackoff: opt.MinRetryBackoff,
		MaxRetryBackoff: opt.MaxRetryBackoff,

		DialTimeout:        opt.DialTimeout,
		DialerRetries:      opt.DialerRetries,
		DialerRetryTimeout: opt.DialerRetryTimeout,
		DialerRetryBackoff: opt.DialerRetryBackoff,
		ReadTimeout:        opt.ReadTimeout,
		WriteTimeout:       opt.WriteTimeout,

		ContextTimeoutEnabled: opt.ContextTimeoutEnabled,

		PoolFIFO:              opt.PoolFIFO,
		PoolSize:              opt.PoolSize,
		MaxConcurrentDials:    opt.MaxConcurrentDials,
		PoolTimeout:           opt.PoolTimeout,
		MinIdleConns:          opt.MinIdleConns,
		MaxIdleConns:          opt.MaxIdleConns,
		MaxActiveConns:        opt.MaxActiveConns,
		ConnMaxIdleTime:       opt.ConnMaxIdleTime,
		ConnMaxLifetime:       opt.ConnMaxLifetime,
		ConnMaxLifetimeJitter: opt.ConnMaxLifetimeJitter,
		ReadBufferSize:        opt.ReadBufferSize,
		WriteBufferSize:       opt.WriteBufferSize,

		PipelineReadBufferSize:  opt.PipelineReadBufferSize,
		PipelineWriteBufferSize: opt.PipelineWriteBufferSize,
		PipelinePoolSize:        opt.PipelinePoolSize,
		DisableIdentity:         opt.DisableIdentity,
		IdentitySuffix:          opt.IdentitySuffix,
		FailingTimeoutSeconds:   opt.FailingTimeoutSeconds,
		TLSConfig:               opt.TLSConfig,
		UnstableResp3:           opt.UnstableResp3,
	}
}
