package main

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/redisproc"
)

// deployment is the lock's nodes, each behind a proxy for network faults,
// and the resource's server, which no fault touches.
type deployment struct {
	servers  []*redisproc.Server // each node's primary
	replicas []*redisproc.Server // each node's replica (nil: the run has no failovers)
	bin      string
	env      [][]string // each node's servers' environment (the clock shim)
	proxies  []*faultnet.Proxy
	admins   []*redis.Client // to each server directly, for the nemesis and the referee
	resource *redisproc.Server
	version  string
	// clocks are each node's clock offset, mapped from the file its
	// servers' clock shim maps (nil: the run has no clock faults); offsets
	// what they hold.
	clocks  [][]byte
	offsets []time.Duration
	tmp     string
}

// clockShift is the source of the preloaded library that lets the nemesis
// step a server's wall clock (clockjump): see the file.
//
//go:embed clockshift/clockshift.c
var clockShift []byte

// buildClockShift compiles the clock shim into dir with the system's C
// compiler.
func buildClockShift(dir string) (string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("clockjump needs a C compiler to build its clock shim (Debian: apt-get install gcc): %w", err)
	}
	src, lib := filepath.Join(dir, "clockshift.c"), filepath.Join(dir, "clockshift.so")
	if err := os.WriteFile(src, clockShift, 0o600); err != nil {
		return "", err
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the clock shim: %v: %s", err, out)
	}
	return lib, nil
}

// stepClock moves node i's wall clock forward by by: one aligned 8-byte
// atomic store into the page the node's servers map, so that no clock
// reading sees half of it.
func (d *deployment) stepClock(i int, by time.Duration) error {
	if d.clocks == nil {
		return fmt.Errorf("node %d has no clock shim", i)
	}
	d.offsets[i] += by
	atomic.StoreInt64((*int64)(unsafe.Pointer(&d.clocks[i][0])), int64(d.offsets[i]))
	return nil
}

// mapClock creates node i's offset file (zero: no shift) and maps it
// shared, for stepClock to write.
func mapClock(path string) ([]byte, error) {
	if err := os.WriteFile(path, make([]byte, 8), 0o600); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func startDeployment(ctx context.Context, cfg config) (d *deployment, err error) {
	bin := cfg.server
	if bin == "" {
		bin = "redis-server"
	}
	if bin, err = exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("the server: %w (Debian: apt-get install redis-server; or give -server)", err)
	}
	d = &deployment{bin: bin}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	var lib string
	if slices.Contains(cfg.faults, "clockjump") {
		if d.tmp, err = os.MkdirTemp("", "redlock-chaos-clock-"); err != nil {
			return nil, err
		}
		if lib, err = buildClockShift(d.tmp); err != nil {
			return nil, err
		}
	}
	for i := range cfg.nodes {
		var env []string
		if lib != "" {
			clock := filepath.Join(d.tmp, fmt.Sprintf("clock-%d", i))
			m, err := mapClock(clock)
			if err != nil {
				return nil, fmt.Errorf("the clock shim's offset file: %w", err)
			}
			d.clocks, d.offsets = append(d.clocks, m), append(d.offsets, 0)
			env = []string{"LD_PRELOAD=" + lib, "CLOCKSHIFT_FILE=" + clock}
		}
		s, err := redisproc.StartEnv(ctx, env, bin)
		if err != nil {
			return nil, err
		}
		d.servers, d.env = append(d.servers, s), append(d.env, env)
		if slices.Contains(cfg.faults, "failover") {
			r, err := d.startReplica(ctx, i, s)
			if err != nil {
				return nil, err
			}
			d.replicas = append(d.replicas, r)
		}
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
	for _, s := range d.replicas {
		if s != nil { // nil: a failover's new replica did not start
			s.Close()
		}
	}
	if d.resource != nil {
		d.resource.Close()
	}
	for _, m := range d.clocks {
		syscall.Munmap(m)
	}
	if d.tmp != "" {
		os.RemoveAll(d.tmp)
	}
}

// startReplica starts a replica of node i's primary (sharing its clock, as
// the clock shim goes) and waits until it is in sync.
func (d *deployment) startReplica(ctx context.Context, i int, primary *redisproc.Server) (*redisproc.Server, error) {
	_, port, _ := strings.Cut(primary.Addr(), ":")
	r, err := redisproc.StartEnv(ctx, d.env[i], d.bin, "--replicaof", "127.0.0.1", port, "--replica-announce-ip", "127.0.0.1")
	if err != nil {
		return nil, fmt.Errorf("node %d's replica: %w", i, err)
	}
	if err := redisproc.WaitInSync(ctx, r.Addr()); err != nil {
		r.Close()
		return nil, fmt.Errorf("node %d's replica: %w", i, err)
	}
	return r, nil
}
