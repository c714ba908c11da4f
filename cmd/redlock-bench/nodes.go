package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultnet"
)

// deployment is the set of nodes a run talks to: where they are, what they
// are, and the proxies (for -node-latency and -fault) in front of them.
type deployment struct {
	describe string
	options  []*redis.Options // one per node, pointing through its proxy if any
	proxies  []*faultnet.Proxy
	cleanup  []func()
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
	if err == nil && (len(cfg.latency) > 0 || len(cfg.faults) > 0) {
		err = d.proxy(cfg.latency)
	}
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *deployment) embedded(n int) error {
	for range n {
		s, err := miniredis.Run()
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
	secure, err := tlsFiles(cfg)
	if err != nil {
		return err
	}
	used := false
	for _, n := range cfg.nodes {
		n = strings.TrimSpace(n)
		var o *redis.Options
		if strings.Contains(n, "://") {
			var err error
			if o, err = redis.ParseURL(n); err != nil {
				return fmt.Errorf("-nodes %q: %w", n, err)
			}
		} else {
			if _, _, err := net.SplitHostPort(n); err != nil {
				return fmt.Errorf("-nodes %q: want host:port or a redis:// URL: %w", n, err)
			}
			o = &redis.Options{Addr: n}
		}
		if o.TLSConfig != nil && secure != nil {
			secure(o.TLSConfig)
			used = true
		}
		d.options = append(d.options, o)
	}
	if secure != nil && !used {
		return errors.New("-tls-ca, -tls-cert, -tls-key: no rediss:// node in -nodes to use them")
	}
	d.describe = fmt.Sprintf("%d Redis nodes given by -nodes", len(cfg.nodes))
	return nil
}

// tlsFiles loads -tls-ca, -tls-cert and -tls-key, and returns what applies
// them to a rediss:// node's TLS configuration (nil if none is given).
func tlsFiles(cfg config) (func(*tls.Config), error) {
	if cfg.tlsCA == "" && cfg.tlsCert == "" {
		return nil, nil
	}
	var roots *x509.CertPool
	if cfg.tlsCA != "" {
		pem, err := os.ReadFile(cfg.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("-tls-ca: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-ca %s: no PEM certificate in it", cfg.tlsCA)
		}
	}
	var certs []tls.Certificate
	if cfg.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.tlsCert, cfg.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		certs = []tls.Certificate{cert}
	}
	return func(c *tls.Config) {
		if roots != nil {
			c.RootCAs = roots
		}
		if certs != nil {
			c.Certificates = certs
		}
	}, nil
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
	for range n {
		o, err := d.startServer(ctx, bin)
		if err != nil {
			return err
		}
		d.options = append(d.options, o)
		for range replicas {
			r, err := d.startServer(ctx, bin, "--replicaof", "127.0.0.1", strings.TrimPrefix(o.Addr, "127.0.0.1:"),
				"--replica-announce-ip", "127.0.0.1")
			if err != nil {
				return err
			}
			if err := waitInSync(ctx, r); err != nil {
				return fmt.Errorf("-replicas: the replica on %s: %w", r.Addr, err)
			}
		}
	}
	d.describe = fmt.Sprintf("%d local redis-server processes started by -spawn (%s, %s)", n, bin, serverVersion(ctx, d.options[0]))
	if replicas > 0 {
		d.describe += fmt.Sprintf(", each with %d replica(s)", replicas)
	}
	return nil
}

// startServer starts one server process on a free loopback port, stopped by
// d.close, and waits until it answers.
//
// Each server gets a directory of its own, removed with it: a replica's full
// sync writes an RDB file there even with saving off, and the working
// directory is no place for it.
func (d *deployment) startServer(ctx context.Context, bin string, args ...string) (*redis.Options, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redlock-bench-")
	if err != nil {
		return nil, fmt.Errorf("-spawn: %w", err)
	}
	d.cleanup = append(d.cleanup, func() { os.RemoveAll(dir) }) // runs after the stop below (cleanup runs backwards)
	cmd := exec.Command(bin, append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning", "--repl-diskless-sync-delay", "0"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not killed twice by the terminal's Ctrl-C
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("-spawn: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	d.cleanup = append(d.cleanup, func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	o := &redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	if err := waitReady(ctx, o, exited); err != nil {
		return nil, fmt.Errorf("-spawn: %s on port %d: %w", bin, port, err)
	}
	return o, nil
}

// waitInSync waits until the replica at o reports its link to its primary
// up.
func waitInSync(ctx context.Context, o *redis.Options) error {
	c := redis.NewClient(o)
	defer c.Close()
	deadline := time.After(20 * time.Second)
	for {
		if info, err := c.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		select {
		case <-deadline:
			return errors.New("not in sync after 20s")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func waitReady(ctx context.Context, o *redis.Options, exited <-chan struct{}) error {
	c := redis.NewClient(o)
	defer c.Close()
	deadline := time.After(10 * time.Second)
	for {
		if c.Ping(ctx).Err() == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited at start")
		case <-deadline:
			return errors.New("not answering after 10s")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// serverVersion is what the node says it runs: "redis 8.0.2", "valkey 8.1.1".
func serverVersion(ctx context.Context, o *redis.Options) string {
	c := redis.NewClient(o)
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "version unknown: " + err.Error()
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	if v := fields["valkey_version"]; v != "" {
		return "valkey " + v
	}
	return "redis " + fields["redis_version"]
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
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

// inject runs the fault schedule against the proxies until ctx ends.
func (d *deployment) inject(ctx context.Context, faults []fault) {
	for _, f := range faults {
		p := d.proxies[f.node]
		set := p.SetBlackhole
		if f.kind == "stop" {
			set = p.SetDown
		}
		go func() {
			select {
			case <-time.After(f.at):
			case <-ctx.Done():
				return
			}
			set(true) // a frozen node keeps its connections and answers nothing
			if f.dur == 0 {
				<-ctx.Done()
			} else {
				select {
				case <-time.After(f.dur):
				case <-ctx.Done():
				}
			}
			set(false)
		}()
	}
}
