package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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
	cfg      config
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
	d = &deployment{bin: bin, cfg: cfg}
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

// strike carries out a node's fault on node i: a server process's signals,
// its proxy's faults, commands to it.
func (d *deployment) strike(ctx context.Context, f *fault, i int) error {
	s, p, admin := d.servers[i], d.proxies[i], d.admins[i]
	// hold waits out the fault's length; the heal runs even if the run
	// ends first (a frozen node must not outlive the run).
	hold := func() { time.Sleep(f.For) }
	heal := context.WithoutCancel(ctx)
	switch nodeFault[f.Kind] {
	case "freeze":
		s.Freeze()
		hold()
		s.Thaw()
	case "kill": // and outage
		s.Kill()
		removed := s.RemoveData()
		hold()
		return errors.Join(removed, s.Restart(heal)) // restarted whatever happened: never left down
	case "snapshot": // and rollback
		// A replica's full sync (after a failover) may be saving: wait
		// for it, up to a TTL.
		err := admin.Save(ctx).Err()
		for wait := time.Now().Add(d.cfg.ttl); err != nil && strings.Contains(err.Error(), "in progress") && time.Now().Before(wait); {
			time.Sleep(20 * time.Millisecond)
			err = admin.Save(ctx).Err()
		}
		if err != nil {
			return fmt.Errorf("SAVE: %w", err)
		}
		hold()
		s.Kill()
		return s.Restart(heal)
	case "partition":
		p.SetDown(true)
		hold()
		p.SetDown(false)
	case "blackhole":
		p.SetBlackhole(true)
		hold()
		p.SetBlackhole(false)
		p.DropConnections() // what was swallowed is gone: no connection is in step any more
	case "latency":
		p.SetDelay(0, d.cfg.ttl/3)
		hold()
		p.SetDelay(0, 0)
	case "scriptflush":
		return admin.ScriptFlush(ctx).Err()
	case "flush": // and amnesia
		return admin.FlushAll(ctx).Err()
	case "evict": // and pressure
		return d.evict(ctx, f, admin)
	case "clockjump":
		return d.stepClock(i, f.Step)
	case "failover":
		return d.failover(ctx, f, i)
	default:
		return fmt.Errorf("unknown fault %q", f.Kind)
	}
	return nil
}

// infoInt reads a numeric field of an INFO reply (0 if absent).
func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// evict puts a node under memory pressure as a cache's traffic would: a
// limit a little above what it holds, allkeys-random, and other data
// written all the while (4 KiB values every 5 ms, cycling over 64 names),
// so that each write evicts a key, a lock's among them, and the node goes
// on taking writes. The limit and the other data go when the fault ends.
func (d *deployment) evict(ctx context.Context, f *fault, admin *redis.Client) error {
	heal := context.WithoutCancel(ctx)
	info, err := admin.Info(ctx, "memory").Result()
	if err != nil {
		return err
	}
	limit := infoInt(info, "used_memory") + 128<<10
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-random").Err(); err != nil {
		return err
	}
	if err := admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(limit, 10)).Err(); err != nil {
		return err
	}
	const fillers = 64
	value := strings.Repeat("x", 4<<10)
	tick := time.NewTicker(5 * time.Millisecond)
	end := time.After(f.For)
	for i := 0; ; i++ {
		select {
		case <-tick.C:
			admin.Set(heal, fmt.Sprintf("chaos:filler:%d", i%fillers), value, 0) // an OOM refusal is pressure too
			continue
		case <-end:
		}
		break
	}
	tick.Stop()
	names := make([]string, fillers)
	for i := range names {
		names[i] = fmt.Sprintf("chaos:filler:%d", i)
	}
	return errors.Join(admin.ConfigSet(heal, "maxmemory", "0").Err(),
		admin.ConfigSet(heal, "maxmemory-policy", "noeviction").Err(),
		admin.Del(heal, names...).Err())
}

// failover promotes node i's replica as a Sentinel would after its primary
// died, with the replica behind: it is promoted first (REPLICAOF NO ONE),
// the primary goes on granting for the fault's length (grants the new
// primary never sees: asynchronous replication's window, stretched), then
// the primary is killed and the node's proxy sends every client to the
// promoted replica. The old primary comes back as the new one's replica, so
// that the node can fail over again.
func (d *deployment) failover(ctx context.Context, f *fault, i int) error {
	heal := context.WithoutCancel(ctx)
	old, promoted := d.servers[i], d.replicas[i]
	if promoted == nil {
		return fmt.Errorf("node %d has no replica (starting its last one failed)", i)
	}
	if err := promoted.Promote(heal); err != nil { // a primary from now on, restarts included
		return err
	}
	admin := promoted.Client()
	time.Sleep(f.For)
	old.Kill()
	d.proxies[i].SetTarget(promoted.Addr())
	d.proxies[i].DropConnections()
	d.admins[i].Close()
	d.servers[i], d.admins[i] = promoted, admin
	old.Close()
	d.replicas[i] = nil
	r, err := d.startReplica(heal, i, promoted)
	if err != nil {
		return err
	}
	d.replicas[i] = r
	return nil
}
