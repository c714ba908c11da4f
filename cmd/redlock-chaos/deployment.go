package main

import (
	"context"
	"fmt"
	"os/exec"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/redisproc"
)

// deployment is the lock's nodes, each behind a proxy for network faults,
// and the resource's server, which no fault touches.
type deployment struct {
	servers  []*redisproc.Server
	proxies  []*faultnet.Proxy
	admins   []*redis.Client // to each server directly, for the nemesis and the referee
	resource *redisproc.Server
	version  string
}

func startDeployment(ctx context.Context, cfg config) (d *deployment, err error) {
	bin := cfg.server
	if bin == "" {
		bin = "redis-server"
	}
	if bin, err = exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("the server: %w (Debian: apt-get install redis-server; or give -server)", err)
	}
	d = &deployment{}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	for range cfg.nodes {
		s, err := redisproc.Start(ctx, bin)
		if err != nil {
			return nil, err
		}
		d.servers = append(d.servers, s)
		p, err := faultnet.Listen(s.Addr())
		if err != nil {
			return nil, err
		}
		d.proxies = append(d.proxies, p)
		d.admins = append(d.admins, s.Client())
	}
	if d.resource, err = redisproc.Start(ctx, bin); err != nil {
		return nil, err
	}
	d.version = redisproc.Version(ctx, d.resource.Addr())
	return d, nil
}

// lockClients returns one client per node, through its proxy, for one
// Locker. Commands are not retried by go-redis: a lost reply is the
// Locker's to judge.
func (d *deployment) lockClients() []*redis.Client {
	out := make([]*redis.Client, len(d.proxies))
	for i, p := range d.proxies {
		out[i] = redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	}
	return out
}

func (d *deployment) close() {
	for _, p := range d.proxies {
		p.Close()
	}
	for _, c := range d.admins {
		c.Close()
	}
	for _, s := range d.servers {
		s.Close()
	}
	if d.resource != nil {
		d.resource.Close()
	}
}
