package main

import (
	"context"
	"crypto/fips140"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/nodeflag"
	"github.com/redlock/redlock/internal/redisproc"
)

// deployment is the set of nodes a run talks to: where they are, what they
// are, and the proxies (for -node-latency and -fault) in front of them.
type deployment struct {
	describe string
	options  []*redis.Options // one per node, pointing through its proxy if any
	proxies  []*faultnet.Proxy
	replicas [][]*redisproc.Server // by node: the replicas -spawn started (-replicas), for freeze-replica
	cleanup  []func()
	// injecting counts inject's faults until each has ended, so that one
	// implementation's fault is undone before the next one's begins.
	injecting sync.WaitGroup
}

func (d *deployment) close() {
	for i := len(d.cleanup) - 1; i >= 0; i-- {
		d.cleanup[i]()
	}
}

// newClients returns one fresh client per node (each implementation gets its
// own, so none inherits another's pooled connections), each with a
// connection dialled by a PING, so that no implementation's first cycles pay
// for the TCP and TLS handshakes. A node that does not answer is left for
// the run to report. minIdle sets MinIdleConns (Locker.Warm opens that
// many).
func (d *deployment) newClients(ctx context.Context, minIdle int) []*redis.Client {
	out := make([]*redis.Client, len(d.options))
	for i, o := range d.options {
		c := *o
		c.MinIdleConns = minIdle
		out[i] = redis.NewClient(&c)
		d.cleanup = append(d.cleanup, func() { out[i].Close() })
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range out {
		wg.Go(func() { c.Ping(ctx) })
	}
	wg.Wait()
	return out
}

func newDeployment(ctx context.Context, cfg config) (*deployment, error) {
	d := &deployment{}
	var err error
	switch {
	case len(cfg.nodes) > 0:
		err = d.remote(cfg)
	case cfg.spawn > 0:
		err = d.spawn(ctx, cfg.spawn, cfg.server, cfg.replicas)
	default:
		err = d.embedded(cfg.embedded)
	}
	if err == nil && (len(cfg.latency) > 0 || slices.ContainsFunc(cfg.faults, fault.onProxy)) {
		err = d.proxy(cfg.latency)
	}
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// embedded starts n in-process nodes. Each is started inside
// crypto/fips140.WithoutEnforcement, whose bypass its goroutines (its
// accept loop, and each connection's, where commands run) inherit: it
// stands in for a Redis server, which names the scripts it caches by their
// SHA-1. So under GODEBUG=fips140=only the nodes work while every client
// here (the library, the floor, redsync) stays enforced: a client that
// computed SHA-1 would panic.
func (d *deployment) embedded(n int) error {
	for range n {
		var s *miniredis.Miniredis
		var err error
		fips140.WithoutEnforcement(func() { s, err = miniredis.Run() })
		if err != nil {
			return fmt.Errorf("starting an in-process node: %w", err)
		}
		d.cleanup = append(d.cleanup, s.Close)
		d.options = append(d.options, &redis.Options{Addr: s.Addr()})
	}
	d.describe = fmt.Sprintf("%d embedded in-process Redis nodes (miniredis; they share this process's CPU)", n)
	return nil
}

func (d *deployment) remote(cfg config) error {
	options, err := nodeflag.Options(cfg.nodes, nodeflag.TLSFiles{CA: cfg.tlsCA, Cert: cfg.tlsCert, Key: cfg.tlsKey})
	if err != nil {
		return err
	}
	d.options = options
	d.describe = fmt.Sprintf("%d Redis nodes given by -nodes", len(cfg.nodes))
	return nil
}

// spawn starts n redis-server processes on free loopback ports; d.close
// stops them (run's deferred close also runs on Ctrl-C, which only cancels
// the context).
func (d *deployment) spawn(ctx context.Context, n int, server string, replicas int) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil && server == "" {
		return errors.New("-spawn: redis-server not found on PATH (Debian: apt-get install redis-server; or give -server)")
	}
	if server != "" {
		if bin, err = exec.LookPath(server); err != nil {
			return fmt.Errorf("-server: %w", err)
		}
	}
	d.replicas = make([][]*redisproc.Server, n)
	for i := range n {
		s, err := d.startServer(ctx, bin)
		if err != nil {
			return err
		}
		d.options = append(d.options, &redis.Options{Addr: s.Addr()})
		for range replicas {
			r, err := d.startServer(ctx, bin, "--replicaof", "127.0.0.1", strings.TrimPrefix(s.Addr(), "127.0.0.1:"),
				"--replica-announce-ip", "127.0.0.1")
			if err != nil {
				return err
			}
			if err := redisproc.WaitInSync(ctx, r.Addr()); err != nil {
				return fmt.Errorf("-replicas: the replica on %s: %w", r.Addr(), err)
			}
			d.replicas[i] = append(d.replicas[i], r)
		}
	}
	d.describe = fmt.Sprintf("%d local redis-server processes started by -spawn (%s, %s)", n, bin, redisproc.Version(ctx, d.options[0].Addr))
	if replicas > 0 {
		d.describe += fmt.Sprintf(", each with %d replica(s)", replicas)
	}
	return nil
}

// startServer starts one server process on a free loopback port (with a
// data directory of its own: a replica's full sync writes an RDB file even
// with saving off), stopped and removed by d.close.
func (d *deployment) startServer(ctx context.Context, bin string, args ...string) (*redisproc.Server, error) {
	s, err := redisproc.Start(ctx, bin, args...)
	if err != nil {
		return nil, fmt.Errorf("-spawn: %w", err)
	}
	d.cleanup = append(d.cleanup, s.Close)
	return s, nil
}

// proxy puts a fault proxy in front of every node, with one-way delays.
func (d *deployment) proxy(latency []time.Duration) error {
	for i, o := range d.options {
		p, err := faultnet.Listen(o.Addr)
		if err != nil {
			return err
		}
		d.cleanup = append(d.cleanup, func() { p.Close() })
		if len(latency) > 0 {
			p.SetDelay(latency[i], latency[i])
		}
		if o.TLSConfig != nil && o.TLSConfig.ServerName == "" { // verify the real host, not the proxy
			host, _, _ := net.SplitHostPort(o.Addr)
			o.TLSConfig = o.TLSConfig.Clone()
			o.TLSConfig.ServerName = host
		}
		o.Addr = p.Addr()
		d.proxies = append(d.proxies, p)
	}
	if len(latency) > 0 {
		d.describe += fmt.Sprintf(", behind delay proxies (%s each way)", joinDurations(latency))
	}
	return nil
}

func joinDurations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}

// inject runs the fault schedule against the proxies (and, for
// freeze-replica, the replica processes) until ctx ends, reporting each
// fault as it begins; d.injecting.Wait returns once every fault is undone.
func (d *deployment) inject(ctx context.Context, faults []fault, report func(string)) {
	for _, f := range faults {
		var set func(bool)
		var did string
		switch f.kind {
		case "freeze-replica":
			// The node itself answers at once; a WAIT for its replicas'
			// acknowledgement waits out its whole timeout.
			rs := d.replicas[f.node]
			addrs := make([]string, len(rs))
			for i, r := range rs {
				addrs[i] = r.Addr()
			}
			set = func(on bool) {
				for _, r := range rs {
					if on {
						r.Freeze()
					} else {
						r.Thaw()
					}
				}
			}
			did = fmt.Sprintf("froze node %d's replica(s) %s (SIGSTOP: the node answers, its WAITs run to their timeout)", f.node, strings.Join(addrs, ","))
		case "stop":
			set, did = d.proxies[f.node].SetDown, fmt.Sprintf("stopped node %d (its proxy refuses connections)", f.node)
		default:
			set, did = d.proxies[f.node].SetBlackhole, fmt.Sprintf("froze node %d (its proxy swallows everything)", f.node)
		}
		d.injecting.Go(func() {
			if !f.begins(ctx) {
				return
			}
			report(fmt.Sprintf("fault %s: %s", f, did))
			set(true) // a frozen node keeps its connections and answers nothing
			f.lasts(ctx)
			set(false)
		})
	}
}
