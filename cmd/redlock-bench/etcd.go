//go:build etcd

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/redlock/redlock/internal/redisproc"
)

// The consensus store measured beside this library (-impl etcd): etcd's
// concurrency.Mutex, whose grant's revision is the fencing token, on a
// cluster of etcd members that this command starts on loopback. Each member
// is this very program run again as a child process (etcdMemberEnv tells it
// to be one), so that a fault can freeze one with SIGSTOP as it freezes a
// redis-server: an in-process member could not be frozen apart from the
// clients measuring it.
//
// Built with -tags etcd only (optional.go says why): etcd's server and its
// gRPC are most of what a fresh machine would download and compile.

func init() {
	taggedImpls["etcd"] = newEtcd
	childMains[etcdMemberEnv] = runEtcdMember
}

// etcdMemberEnv holds a member's spec (JSON) in a child process started by
// startEtcd; main and TestMain hand such a process to runEtcdMember
// (childMains).
const etcdMemberEnv = "REDLOCK_BENCH_ETCD_MEMBER"

// etcdMemberSpec is what a child needs to start its member.
type etcdMemberSpec struct {
	Name    string `json:"name"`
	Dir     string `json:"dir"`
	Client  string `json:"client"`  // http://127.0.0.1:port
	Peer    string `json:"peer"`    // http://127.0.0.1:port
	Cluster string `json:"cluster"` // name=peer,...
}

// runEtcdMember runs one embedded etcd member until its stdin closes (the
// parent closed it, or died), and returns the process's exit status. It
// prints "ready" once the member serves clients.
func runEtcdMember(specJSON string) int {
	var spec etcdMemberSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "etcd member: bad spec:", err)
		return 2
	}
	client, err := url.Parse(spec.Client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		return 2
	}
	peer, err := url.Parse(spec.Peer)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = spec.Name, spec.Dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster, cfg.InitialClusterToken, cfg.ClusterState = spec.Cluster, "redlock-bench", embed.ClusterStateFlagNew
	cfg.LogLevel, cfg.LogOutputs = "error", []string{"stderr"}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("ready")
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		return 1
	case <-time.After(time.Minute):
		fmt.Fprintln(os.Stderr, "etcd member: not ready after a minute")
		return 1
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// etcdMember is one child process of an etcdCluster.
type etcdMember struct {
	name, client string
	cmd          *exec.Cmd
	stdin        io.Closer
	log          string // its stderr
}

// etcdCluster is the members startEtcd started, and an admin client (its
// own, not one measured) that finds the leader for a fault.
type etcdCluster struct {
	members []*etcdMember
	admin   *clientv3.Client
	dir     string
	version string
}

func (c *etcdCluster) endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.client
	}
	return out
}

// startEtcd starts n members on free loopback ports and waits until every
// one serves clients.
func startEtcd(ctx context.Context, n int) (*etcdCluster, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("-impl etcd: the members run this program again: %w", err)
	}
	dir, err := os.MkdirTemp("", "redlock-bench-etcd-")
	if err != nil {
		return nil, err
	}
	c := &etcdCluster{dir: dir}
	var specs []etcdMemberSpec
	var cluster []string
	for i := range n {
		cp, err := redisproc.FreePort()
		if err != nil {
			c.close()
			return nil, err
		}
		pp, err := redisproc.FreePort()
		if err != nil {
			c.close()
			return nil, err
		}
		s := etcdMemberSpec{Name: "m" + strconv.Itoa(i), Dir: filepath.Join(dir, "m"+strconv.Itoa(i)),
			Client: "http://127.0.0.1:" + strconv.Itoa(cp), Peer: "http://127.0.0.1:" + strconv.Itoa(pp)}
		specs = append(specs, s)
		cluster = append(cluster, s.Name+"="+s.Peer)
	}
	ready := make(chan error, n)
	for _, s := range specs {
		s.Cluster = strings.Join(cluster, ",")
		spec, _ := json.Marshal(s)
		m := &etcdMember{name: s.Name, client: s.Client, log: filepath.Join(dir, s.Name+".log")}
		logFile, err := os.Create(m.log)
		if err != nil {
			c.close()
			return nil, err
		}
		m.cmd = exec.Command(self)
		m.cmd.Env = append(os.Environ(), etcdMemberEnv+"="+string(spec))
		m.cmd.Stderr = logFile
		stdin, err := m.cmd.StdinPipe()
		if err != nil {
			logFile.Close()
			c.close()
			return nil, err
		}
		stdout, err := m.cmd.StdoutPipe()
		if err != nil {
			logFile.Close()
			c.close()
			return nil, err
		}
		if err := m.cmd.Start(); err != nil {
			logFile.Close()
			c.close()
			return nil, fmt.Errorf("-impl etcd: starting member %s: %w", m.name, err)
		}
		logFile.Close()
		m.stdin = stdin
		c.members = append(c.members, m)
		go func() {
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if strings.TrimSpace(line) != "ready" {
				ready <- fmt.Errorf("etcd member %s did not start (%v): %s", m.name, err, tail(m.log))
				return
			}
			ready <- nil
			_, _ = io.Copy(io.Discard, stdout)
		}()
	}
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for range n {
		select {
		case err := <-ready:
			if err != nil {
				c.close()
				return nil, err
			}
		case <-timeout.C:
			c.close()
			return nil, errors.New("-impl etcd: the members were not ready after a minute")
		case <-ctx.Done():
			c.close()
			return nil, ctx.Err()
		}
	}
	c.admin, err = clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.close()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if st, err := c.admin.Status(sctx, c.members[0].client); err == nil {
		c.version = st.Version
	}
	return c, nil
}

// tail is the end of a member's log, for an error message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = "..." + s[len(s)-600:]
	}
	return s
}

// close stops every member (thawing a frozen one first) and removes their
// data.
func (c *etcdCluster) close() {
	if c.admin != nil {
		c.admin.Close()
	}
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Go(func() {
			_ = m.cmd.Process.Signal(syscall.SIGCONT)
			m.stdin.Close() // the member returns when its stdin ends
			done := make(chan struct{})
			go func() { _ = m.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = m.cmd.Process.Kill()
				<-done
			}
		})
	}
	wg.Wait()
	os.RemoveAll(c.dir)
}

// member resolves a fault's target: a member's number, or the member that
// is the leader (or a follower) when the fault begins.
func (c *etcdCluster) member(ctx context.Context, f fault) (int, error) {
	if f.role == "" {
		return f.node, nil
	}
	var leader uint64
	ids := make([]uint64, len(c.members))
	for i, m := range c.members {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.admin.Status(sctx, m.client)
		cancel()
		if err != nil {
			continue // frozen or stopped: neither leader nor a follower to freeze
		}
		ids[i] = st.Header.MemberId
		leader = st.Leader
	}
	for i, id := range ids {
		if id != 0 && (id == leader) == (f.role == "leader") {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no %s answers", f.role)
}

// inject carries out the fault schedule on the members: freeze is SIGSTOP
// (then SIGCONT), stop is SIGKILL.
func (c *etcdCluster) inject(ctx context.Context, faults []fault, report func(string)) {
	for _, f := range faults {
		go func() {
			if !f.begins(ctx) {
				return
			}
			i, err := c.member(ctx, f)
			if err != nil {
				report(fmt.Sprintf("fault %s: %v", f, err))
				return
			}
			p := c.members[i].cmd.Process
			if f.kind == "stop" {
				report(fmt.Sprintf("fault %s: stopped member %s", f, c.members[i].name))
				_ = p.Kill()
				return
			}
			report(fmt.Sprintf("fault %s: froze member %s", f, c.members[i].name))
			_ = p.Signal(syscall.SIGSTOP)
			f.lasts(ctx)
			_ = p.Signal(syscall.SIGCONT)
		}()
	}
}

// newEtcd is etcd's concurrency.Mutex on -etcd members: each client a
// session of its own (a lease kept alive in the background, TTL -ttl
// rounded up to whole seconds), each attempt bounded by -etcd-timeout, as
// an application bounds its etcd calls.
func newEtcd(ctx context.Context, d *deployment, cfg config) (*impl, error) {
	cluster, err := startEtcd(ctx, cfg.etcdMembers)
	if err != nil {
		return nil, err
	}
	d.cleanup = append(d.cleanup, cluster.close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.endpoints(), DialTimeout: 5 * time.Second,
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
		Logger: zap.NewNop()}) // its retry warnings would drown the report; the errors are counted
	if err != nil {
		return nil, err
	}
	d.cleanup = append(d.cleanup, func() { cli.Close() })
	ttl := int((cfg.ttl + time.Second - 1) / time.Second)
	// A session's lease is granted here, within a bound: NewSession would
	// grant it under the client's context, which has none.
	newSession := func(ctx context.Context) (*concurrency.Session, error) {
		gctx, cancel := context.WithTimeout(ctx, cfg.etcdTimeout)
		lease, err := cli.Grant(gctx, int64(ttl))
		cancel()
		if err != nil {
			return nil, err
		}
		return concurrency.NewSession(cli, concurrency.WithTTL(ttl), concurrency.WithLease(lease.ID))
	}
	sessions := make(chan *concurrency.Session, cfg.clients)
	for range cfg.clients {
		s, err := newSession(ctx)
		if err != nil {
			return nil, fmt.Errorf("-impl etcd: a session: %w", err)
		}
		sessions <- s
	}
	d.cleanup = append(d.cleanup, func() {
		for range cfg.clients {
			s := <-sessions
			if s != nil {
				s.Orphan() // its lease expires on its own: a closed cluster cannot revoke it
			}
		}
	})
	im := &impl{name: "etcd", drain: func() {},
		about: fmt.Sprintf("etcd %s concurrency.Mutex, %d member(s) on loopback (child processes), session TTL %ds, attempts bounded by %v, revision as fencing token",
			cluster.version, cfg.etcdMembers, ttl, cfg.etcdTimeout),
		inject: func(ctx context.Context, faults []fault, report func(string)) { cluster.inject(ctx, faults, report) },
	}
	im.cycle = func(ctx context.Context, key string) (acq, rel time.Duration, o outcome, err error) {
		s := <-sessions
		defer func() { sessions <- s }()
		select {
		case <-s.Done(): // its lease expired (keep-alives lost to a fault): a new one
			n, err := newSession(ctx)
			if err != nil {
				return 0, 0, failed, fmt.Errorf("a new session: %w", err)
			}
			s = n
		default:
		}
		m := concurrency.NewMutex(s, "/"+key)
		t0 := time.Now()
		actx, cancel := context.WithTimeout(ctx, cfg.etcdTimeout)
		if cfg.mode == "lock" {
			err = m.Lock(actx)
		} else {
			err = m.TryLock(actx)
		}
		cancel()
		acq = time.Since(t0)
		switch {
		case errors.Is(err, concurrency.ErrLocked):
			return acq, 0, contended, err
		case err != nil:
			// The attempt may have put its waiter key before its reply
			// was lost; the session keeps it alive, and it would stand
			// in line for this name until the session drew it again.
			// (Lock's own clean-up after a failed wait runs under the
			// client's context, which has no deadline: -mode lock
			// attempts can outlast -etcd-timeout when a quorum is gone.)
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.etcdTimeout)
			_, _ = cli.Delete(dctx, m.Key())
			cancel()
			return acq, 0, failed, err
		}
		hold(ctx, cfg.hold)
		t1 := time.Now()
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.etcdTimeout)
		err = m.Unlock(uctx)
		cancel()
		rel = time.Since(t1)
		if err != nil {
			return acq, rel, failed, err
		}
		return acq, rel, acquired, nil
	}
	return im, nil
}
