// Package harness starts independent Redis servers in Docker containers for
// the integration tests, and injects real faults into them: crash and
// restart (with or without persistence), freeze (docker pause), per-node
// latency, black holes and partitions (through an in-process TCP proxy),
// script-cache loss and key loss.
//
// Every address a test dials is on 127.0.0.1: container ports are published
// on loopback only, and the proxies listen there too.
//
// Each node runs one server: Redis 7.0, Redis 8.0, Valkey 8.1 or Valkey 9.1,
// from the images redlock-test/redis:7.0, redlock-test/redis:8.0,
// redlock-test/valkey:8.1 and redlock-test/valkey:9.1 that
// scripts/integration-setup.sh pulls or builds
// offline; $REDLOCK_TEST_SERVER chooses the suite's. Nodes can serve TLS
// only, and be replaced by another server on the same data (a rolling
// upgrade). The tests need
// TESTCONTAINERS_RYUK_DISABLED=true and TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
// on machines without a reaper image; Setup sets them if unset.
package harness

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/ports"
	"github.com/redlock/redlock/redlock"
)

// Label marks every container the harness starts, so that a set-up script
// can remove those left behind by a crashed run.
const Label = "redlock.test"

// DefaultServer is the suite's server when $REDLOCK_TEST_SERVER is unset.
const DefaultServer = "redis:7.0"

// Servers are the servers scripts/integration-setup.sh makes images of.
var Servers = []string{"redis:7.0", "redis:8.0", "valkey:8.1", "valkey:9.1"}

// Setup sets the environment testcontainers-go needs here, unless the caller
// set it: no reaper container, and the Docker host reached on loopback. Call
// it from TestMain before any container starts.
func Setup() {
	for k, v := range map[string]string{
		"TESTCONTAINERS_RYUK_DISABLED": "true",
		"TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1",
	} {
		if _, set := os.LookupEnv(k); !set {
			os.Setenv(k, v)
		}
	}
}

// SuiteServer returns the server the suite runs on: $REDLOCK_TEST_SERVER
// (redis:7.0, redis:8.0, valkey:8.1 or valkey:9.1; scripts/test.sh says
// which runs take the whole suite), or DefaultServer.
func SuiteServer() string {
	if s := os.Getenv("REDLOCK_TEST_SERVER"); s != "" {
		return s
	}
	return DefaultServer
}

// Image returns the Docker image of server, as scripts/build-redis-image.sh
// names it.
func Image(server string) string { return "redlock-test/" + server }

// program returns the server's executable in its image: redis-server or
// valkey-server.
func program(server string) string {
	name, _, _ := strings.Cut(server, ":")
	return name + "-server"
}

// Options configures a Cluster.
type Options struct {
	Nodes int // default 5
	// Servers gives node i the server Servers[i] (redis:7.0, redis:8.0,
	// valkey:8.1, valkey:9.1); nodes past its end, and every node when it is empty, run
	// SuiteServer().
	Servers []string
	// Persistent runs every node with AOF and appendfsync always, so that a
	// crash and restart keeps every acknowledged write. Otherwise nodes keep
	// nothing across a restart.
	Persistent bool
	// TLS serves TLS only (the plain port is off), with certificates the
	// harness makes, and requires client certificates, as Redis does by
	// default: the nodes' clients get a client certificate and trust the
	// harness's CA.
	TLS bool
}

// Cluster is a set of independent Redis servers.
type Cluster struct {
	Nodes []*Node
	// TLSConfig is what a client of a TLS cluster needs (nil otherwise).
	TLSConfig *tls.Config
	// Certs holds the certificates' PEM files, for tools that take paths.
	Certs *Certs
}

// Node is one Redis server in a container, published on a fixed loopback
// port (so that it comes back on the same port after a restart or a
// replacement), with a fault proxy in front of it.
type Node struct {
	Index int
	// Server is what runs now, e.g. redis:8.0.
	Server string
	// Client reaches the server through Proxy: give it to the Locker.
	Client *redis.Client
	// Admin reaches the server directly, for inspection and fault injection.
	Admin *redis.Client
	// Proxy sits between Client and the server: delays, black holes,
	// partitions.
	Proxy *faultnet.Proxy
	// Addr is the server's published address on 127.0.0.1.
	Addr string

	port    int
	dataDir string // the host directory mounted at /data
	dirs    string // where data directories are made: removed after every container
	opts    Options
	certs   *Certs
	t       testing.TB
	ctr     *testcontainers.DockerContainer
	docker  *client.Client
}

// Start starts a cluster and stops it when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 5
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	docker, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("harness: docker client: %v", err)
	}
	t.Cleanup(func() { docker.Close() })

	c := &Cluster{Nodes: make([]*Node, opts.Nodes)}
	dirs := t.TempDir() // before the containers' cleanups, so removed after them
	if opts.TLS {
		if c.Certs, err = makeCerts(t.TempDir()); err != nil {
			t.Fatalf("harness: certificates: %v", err)
		}
		c.TLSConfig = c.Certs.ClientConfig()
	}
	errs := make([]error, opts.Nodes)
	var wg sync.WaitGroup
	for i := range opts.Nodes {
		server := SuiteServer()
		if i < len(opts.Servers) {
			server = opts.Servers[i]
		}
		wg.Go(func() { c.Nodes[i], errs[i] = startNode(ctx, t, i, server, opts, c.Certs, docker, dirs) })
	}
	wg.Wait()
	for _, n := range c.Nodes {
		if n != nil {
			t.Cleanup(n.close)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("harness: starting %d Redis containers: %v\n"+
			"(run scripts/test.sh, which starts Docker and builds the images)", opts.Nodes, err)
	}
	return c
}

// startNode starts node i. A published port can be taken between the check
// that it is free and Docker binding it, so a bind failure is retried on
// another port.
func startNode(ctx context.Context, t testing.TB, i int, server string, opts Options, certs *Certs, docker *client.Client, dirs string) (*Node, error) {
	n := &Node{Index: i, Server: server, opts: opts, certs: certs, t: t, docker: docker, dirs: dirs}
	var err error
	if n.dataDir, err = os.MkdirTemp(dirs, "data"); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		n.port = port
		err = n.run(ctx)
		if err == nil {
			break
		}
		if attempt == 5 || !strings.Contains(err.Error(), "already allocated") && !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
	}
	n.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
	if n.Proxy, err = faultnet.Listen(n.Addr); err != nil {
		_ = n.ctr.Terminate(context.Background())
		return nil, err
	}
	n.Client = redis.NewClient(n.ClientOptions("", ""))
	admin := n.ClientOptions("", "")
	admin.Addr, admin.MaxRetries = n.Addr, -1
	n.Admin = redis.NewClient(admin)
	if err := n.WaitReady(ctx); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

// ClientOptions returns options for a client that reaches the node through
// its proxy as user (the default user when empty), with TLS when the cluster
// has it.
func (n *Node) ClientOptions(user, password string) *redis.Options {
	o := &redis.Options{Addr: n.Proxy.Addr(), Username: user, Password: password}
	if n.certs != nil {
		o.TLSConfig = n.certs.ClientConfig()
	}
	return o
}

// run starts the node's container: n.Server's image on n.port, with
// n.dataDir as /data.
func (n *Node) run(ctx context.Context) error {
	args := []string{program(n.Server), "--protected-mode", "no", "--dir", "/data"}
	if n.opts.Persistent {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always", "--save", "")
	} else {
		args = append(args, "--appendonly", "no", "--save", "")
	}
	binds := []string{n.dataDir + ":/data"}
	if n.certs != nil {
		args = append(args, "--port", "0", "--tls-port", "6379",
			"--tls-cert-file", "/tls/server.crt", "--tls-key-file", "/tls/server.key",
			"--tls-ca-cert-file", "/tls/ca.crt", "--tls-auth-clients", "yes")
		binds = append(binds, n.certs.Dir+":/tls:ro")
	}
	ctr, err := testcontainers.Run(ctx, Image(n.Server),
		testcontainers.WithCmd(args...),
		testcontainers.WithExposedPorts("6379/tcp"),
		testcontainers.WithLabels(containerLabels()),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("6379/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(n.port)}},
			}
			hc.Binds = binds
		}),
		testcontainers.WithWaitStrategy(wait.ForLog("Ready to accept connections").WithStartupTimeout(time.Minute)),
		testcontainers.WithLogger(tclog.TestLogger(n.t)), // into the test's log, not stderr
	)
	if err != nil {
		if ctr != nil {
			_ = ctr.Terminate(context.Background())
		}
		return fmt.Errorf("%s (%s): %w", n.Server, Image(n.Server), err)
	}
	n.ctr = ctr
	return nil
}

// Replace stops the node gracefully and starts server in its place on the
// same port, as an operator upgrading a node would: on the same data
// directory when keepData, else on an empty one. The proxy and clients stay;
// their connections break and reconnect.
func (n *Node) Replace(ctx context.Context, server string, keepData bool) error {
	if err := n.Stop(ctx); err != nil {
		return err
	}
	if err := n.ctr.Terminate(ctx); err != nil {
		return fmt.Errorf("replace node %d: remove the old container: %w", n.Index, err)
	}
	if !keepData {
		dir, err := os.MkdirTemp(n.dirs, "data")
		if err != nil {
			return err
		}
		n.dataDir = dir
	}
	n.Server = server
	if err := n.run(ctx); err != nil {
		return fmt.Errorf("replace node %d by %s: %w", n.Index, server, err)
	}
	return n.WaitReady(ctx)
}

var (
	portsMu sync.Mutex
	used    = map[int]bool{} // ports this process handed out already
)

// freePort returns a port on 127.0.0.1 that was free a moment ago. It picks
// from 20000-32767, below Linux's ephemeral range, so that outgoing client
// connections do not take it before Docker binds it (a run's share of that
// where runs go side by side: package ports), and never returns a port twice.
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi, err := ports.Range(20000, 32768)
	if err != nil {
		return 0, err
	}
	for range 1000 {
		port := lo + rand.IntN(hi-lo)
		if used[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		ln.Close()
		used[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("harness: no free port in %d-%d", lo, hi-1)
}

func (n *Node) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = n.docker.ContainerUnpause(ctx, n.ctr.GetContainerID(), client.ContainerUnpauseOptions{})
	n.Client.Close()
	n.Admin.Close()
	n.Proxy.Close()
	_ = n.ctr.Terminate(ctx)
}

// Lockers returns the clients a Locker uses, in node order.
func (c *Cluster) Lockers() []redlock.Node {
	out := make([]redlock.Node, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Client
	}
	return out
}

// WaitReady waits until the server answers PING directly.
func (n *Node) WaitReady(ctx context.Context) error {
	for {
		err := n.Admin.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %d at %s not ready: %w", n.Index, n.Addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Crash kills the server (SIGKILL): no shutdown, no final save.
func (n *Node) Crash(ctx context.Context) error {
	if _, err := n.docker.ContainerKill(ctx, n.ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("crash node %d: %w", n.Index, err)
	}
	return n.waitState(ctx, false)
}

// Stop stops the server gracefully (SIGTERM).
func (n *Node) Stop(ctx context.Context) error {
	timeout := 10 * time.Second
	if err := n.ctr.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("stop node %d: %w", n.Index, err)
	}
	return nil
}

// Start starts a stopped or crashed server again, on the same port, and waits
// until it answers. Without persistence it comes back empty.
func (n *Node) Start(ctx context.Context) error {
	if _, err := n.docker.ContainerStart(ctx, n.ctr.GetContainerID(), client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start node %d: %w", n.Index, err)
	}
	return n.WaitReady(ctx)
}

// Restart crashes the server and starts it again.
func (n *Node) Restart(ctx context.Context) error {
	if err := n.Crash(ctx); err != nil {
		return err
	}
	return n.Start(ctx)
}

func (n *Node) waitState(ctx context.Context, running bool) error {
	for {
		st, err := n.ctr.State(ctx)
		if err != nil {
			return err
		}
		if st.Running == running {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Freeze pauses the container (docker pause): connections are still
// accepted by the kernel, and nothing is answered. A hung node.
func (n *Node) Freeze(ctx context.Context) error {
	if _, err := n.docker.ContainerPause(ctx, n.ctr.GetContainerID(), client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("freeze node %d: %w", n.Index, err)
	}
	return nil
}

// Thaw resumes a frozen container.
func (n *Node) Thaw(ctx context.Context) error {
	if _, err := n.docker.ContainerUnpause(ctx, n.ctr.GetContainerID(), client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("thaw node %d: %w", n.Index, err)
	}
	return nil
}

// SetLatency delays traffic between Client and the server: up for requests,
// down for replies.
func (n *Node) SetLatency(up, down time.Duration) { n.Proxy.SetDelay(up, down) }

// Partition cuts Client off from the server: open connections are dropped
// and new ones go into a black hole. Admin still reaches it.
func (n *Node) Partition() {
	n.Proxy.SetBlackhole(true)
	n.Proxy.DropConnections()
}

// Heal ends a partition.
func (n *Node) Heal() {
	n.Proxy.SetBlackhole(false)
	n.Proxy.DropConnections() // connections opened into the black hole are stale
}

// FlushScripts empties the server's script cache (SCRIPT FLUSH), as a
// restart or failover would.
func (n *Node) FlushScripts(ctx context.Context) error {
	return n.Admin.ScriptFlush(ctx).Err()
}

// LoseKey makes the server drop key now, as a forward clock jump or an
// eviction would, and waits until it is gone.
func (n *Node) LoseKey(ctx context.Context, key string) error {
	if err := n.Admin.PExpire(ctx, key, time.Millisecond).Err(); err != nil {
		return err
	}
	for {
		k, err := n.Admin.Exists(ctx, key).Result()
		if err != nil || k == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// Holders returns the indexes of nodes where key holds value (read directly).
func (c *Cluster) Holders(ctx context.Context, key, value string) ([]int, error) {
	var idx []int
	for _, n := range c.Nodes {
		v, err := n.Admin.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", n.Index, err)
		}
		if v == value {
			idx = append(idx, n.Index)
		}
	}
	return idx, nil
}

// Keys returns every key on every node, by node.
func (c *Cluster) Keys(ctx context.Context, pattern string) ([][]string, error) {
	out := make([][]string, len(c.Nodes))
	for i, n := range c.Nodes {
		keys, err := n.Admin.Keys(ctx, pattern).Result()
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", n.Index, err)
		}
		out[i] = keys
	}
	return out, nil
}

// ClientsAs returns a client per node, through its proxy, that logs in as
// user; they are closed when the test ends.
func (c *Cluster) ClientsAs(t testing.TB, user, password string) []redlock.Node {
	out := make([]redlock.Node, len(c.Nodes))
	for i, n := range c.Nodes {
		cl := redis.NewClient(n.ClientOptions(user, password))
		t.Cleanup(func() { cl.Close() })
		out[i] = cl
	}
	return out
}

// SetUser creates or resets the ACL user name on every node with rules
// (ACL SETUSER name reset rules...).
func (c *Cluster) SetUser(ctx context.Context, name string, rules ...string) error {
	args := []any{"ACL", "SETUSER", name, "reset"}
	for _, r := range rules {
		args = append(args, r)
	}
	for _, n := range c.Nodes {
		if err := n.Admin.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("node %d: ACL SETUSER %s: %w", n.Index, name, err)
		}
	}
	return nil
}
