package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
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
// own, so none inherits another's pooled connections).
func (d *deployment) newClients() []*redis.Client {
	out := make([]*redis.Client, len(d.options))
	for i, o := range d.options {
		c := *o
		out[i] = redis.NewClient(&c)
		d.cleanup = append(d.cleanup, func() { out[i].Close() })
	}
	return out
}

func newDeployment(ctx context.Context, cfg config) (*deployment, error) {
	d := &deployment{}
	var err error
	switch {
	case len(cfg.nodes) > 0:
		err = d.remote(cfg.nodes)
	case cfg.spawn > 0:
		err = d.spawn(ctx, cfg.spawn)
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

func (d *deployment) remote(nodes []string) error {
	for _, n := range nodes {
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
		d.options = append(d.options, o)
	}
	d.describe = fmt.Sprintf("%d Redis nodes given by -nodes", len(nodes))
	return nil
}

// spawn starts n redis-server processes on free loopback ports; d.close
// stops them (run's deferred close also runs on Ctrl-C, which only cancels
// the context).
func (d *deployment) spawn(ctx context.Context, n int) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return errors.New("-spawn: redis-server not found on PATH (Debian: apt-get install redis-server)")
	}
	for range n {
		port, err := freePort()
		if err != nil {
			return err
		}
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not killed twice by the terminal's Ctrl-C
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("-spawn: %w", err)
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
		d.options = append(d.options, o)
		if err := waitReady(ctx, o, exited); err != nil {
			return fmt.Errorf("-spawn: redis-server on port %d: %w", port, err)
		}
	}
	d.describe = fmt.Sprintf("%d local redis-server processes started by -spawn (%s)", n, bin)
	return nil
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
