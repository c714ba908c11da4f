// Package harness starts independent Redis servers in Docker containers for
// the integration tests, and injects real faults into them: crash and
// restart (with or without persistence), freeze (docker pause), per-node
// latency, black holes and partitions (through an in-process TCP proxy),
// script-cache loss and key loss.
//
// Every address a test dials is on 127.0.0.1: container ports are published
// on loopback only, and the proxies listen there too.
//
// The image is $REDLOCK_TEST_IMAGE (default redis:7); scripts/test.sh builds
// a local one where no registry can be reached. The tests need
// TESTCONTAINERS_RYUK_DISABLED=true and TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
// on machines without a reaper image; Setup sets them if unset.
package harness

import (
	"context"
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
	"github.com/redlock/redlock/redlock"
)

// Label marks every container the harness starts, so that a set-up script
// can remove those left behind by a crashed run.
const Label = "redlock.test"

// DefaultImage is used when $REDLOCK_TEST_IMAGE is unset.
const DefaultImage = "redis:7"

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

// Image returns the Redis image the tests run.
func Image() string {
	if img := os.Getenv("REDLOCK_TEST_IMAGE"); img != "" {
		return img
	}
	return DefaultImage
}

// Options configures a Cluster.
type Options struct {
	Nodes int // default 5
	// Persistent runs every node with AOF and appendfsync always, so that a
	// crash and restart keeps every acknowledged write. Otherwise nodes keep
	// nothing across a restart.
	Persistent bool
}

// Cluster is a set of independent Redis servers.
type Cluster struct {
	Nodes []*Node
}

// Node is one Redis server in a container, published on a fixed loopback
// port (so that it comes back on the same port after a restart), with a
// fault proxy in front of it.
type Node struct {
	Index int
	// Client reaches the server through Proxy: give it to the Locker.
	Client *redis.Client
	// Admin reaches the server directly, for inspection and fault injection.
	Admin *redis.Client
	// Proxy sits between Client and the server: delays, black holes,
	// partitions.
	Proxy *faultnet.Proxy
	// Addr is the server's published address on 127.0.0.1.
	Addr string

	ctr    *testcontainers.DockerContainer
	docker *client.Client
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
	errs := make([]error, opts.Nodes)
	var wg sync.WaitGroup
	for i := range opts.Nodes {
		wg.Go(func() { c.Nodes[i], errs[i] = startNode(ctx, t, i, opts, docker) })
	}
	wg.Wait()
	for _, n := range c.Nodes {
		if n != nil {
			t.Cleanup(n.close)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("harness: starting %d Redis containers from %s: %v\n"+
			"(run scripts/test.sh, which starts Docker and builds the image, or set REDLOCK_TEST_IMAGE)", opts.Nodes, Image(), err)
	}
	return c
}

// startNode starts node i. A published port can be taken between the check
// that it is free and Docker binding it, so a bind failure is retried on
// another port.
func startNode(ctx context.Context, t testing.TB, i int, opts Options, docker *client.Client) (*Node, error) {
	for attempt := 1; ; attempt++ {
		n, err := tryStartNode(ctx, t, i, opts, docker)
		if err == nil || attempt == 5 || !strings.Contains(err.Error(), "already allocated") && !strings.Contains(err.Error(), "address already in use") {
			return n, err
		}
	}
}

func tryStartNode(ctx context.Context, t testing.TB, i int, opts Options, docker *client.Client) (*Node, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"redis-server", "--protected-mode", "no", "--dir", "/data"}
	if opts.Persistent {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always", "--save", "")
	} else {
		args = append(args, "--appendonly", "no", "--save", "")
	}
	ctr, err := testcontainers.Run(ctx, Image(),
		testcontainers.WithCmd(args...),
		testcontainers.WithExposedPorts("6379/tcp"),
		testcontainers.WithLabels(map[string]string{Label: "1"}),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("6379/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port)}},
			}
		}),
		testcontainers.WithWaitStrategy(wait.ForLog("Ready to accept connections").WithStartupTimeout(time.Minute)),
		testcontainers.WithLogger(tclog.TestLogger(t)), // into the test's log, not stderr
	)
	if err != nil {
		if ctr != nil {
			_ = ctr.Terminate(context.Background())
		}
		return nil, err
	}
	n := &Node{Index: i, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), ctr: ctr, docker: docker}
	if n.Proxy, err = faultnet.Listen(n.Addr); err != nil {
		_ = ctr.Terminate(context.Background())
		return nil, err
	}
	n.Client = redis.NewClient(&redis.Options{Addr: n.Proxy.Addr()})
	n.Admin = redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
	if err := n.WaitReady(ctx); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

var (
	portsMu sync.Mutex
	used    = map[int]bool{} // ports this process handed out already
)

// freePort returns a port on 127.0.0.1 that was free a moment ago. It picks
// from 20000-32767, below Linux's ephemeral range, so that outgoing client
// connections do not take it before Docker binds it, and never returns a
// port twice.
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := 20000 + rand.IntN(12768)
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
	return 0, errors.New("harness: no free port in 20000-32767")
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
