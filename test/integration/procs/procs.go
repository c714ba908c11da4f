// Package procs runs Redis and Valkey servers and Sentinels as plain
// processes on 127.0.0.1, for the tests whose servers tell clients
// addresses (replicas, Sentinel, Redis Cluster): every address they know
// and announce is 127.0.0.1:<port>, with no container network in between.
//
// The binaries are the wrappers scripts/fetch-redis-server.sh unpacks under
// $REDLOCK_SERVERS_DIR (default ~/.cache/redlock/servers); scripts/test.sh
// fetches them. Faults are signals: Freeze (SIGSTOP) and Thaw (SIGCONT) a
// hung server, Kill (SIGKILL) a crash. Every process is killed when the test
// ends, and a failed test's log shows each process's output.
package procs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/ports"
	"github.com/redlock/redlock/internal/redisproc"
)

// Binary returns the path of server's tool ("server", "sentinel" or "cli"),
// e.g. Binary("valkey:9.1", "sentinel"), failing the test if it was not
// fetched.
func Binary(t testing.TB, server, tool string) string {
	t.Helper()
	bin, err := binaryPath(server, tool)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func binaryPath(server, tool string) (string, error) {
	name, version, ok := strings.Cut(server, ":")
	if !ok {
		return "", fmt.Errorf("procs: server %q: want NAME:VERSION", server)
	}
	dir := os.Getenv("REDLOCK_SERVERS_DIR")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, ".cache", "redlock", "servers")
	}
	bin := filepath.Join(dir, name+"-"+version, "bin", name+"-"+tool)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("procs: %s not found (run scripts/integration-setup.sh, which fetches it): %w", bin, err)
	}
	return bin, nil
}

// Proc is one running server or Sentinel: a redisproc.Server (the one
// launcher of the repository's tools and tests) bound to a test.
type Proc struct {
	Name   string // for logs: "node 0 primary"
	Port   int
	Addr   string // 127.0.0.1:Port
	Client *redis.Client

	srv *redisproc.Server
}

// FreePort returns a loopback port that was free a moment ago, with its
// cluster bus port (BusPort) free too: from 10000-14999, below Linux's
// ephemeral range (where outgoing connections could take it first) and
// away from the Docker harness's 20000-32767; a run's share of that where
// runs go side by side (package ports). Never the same twice in a process.
func FreePort() (int, error) {
	return ports.Free(10000, 15000, BusPort(0))
}

// BusPort is the cluster bus port a cluster node on port listens on.
func BusPort(port int) int { return port + 5000 }

// Start runs bin on port with a directory of the test's, with --port,
// --bind 127.0.0.1 and --dir first, then args (or, when args[0] is a .conf
// file, with args alone: the file says all), and waits until it answers
// PING (redisproc.StartOn). The process is killed when the test ends, and a
// failed test's log shows its output.
func Start(t testing.TB, name, bin string, port int, args ...string) *Proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := redisproc.StartOn(ctx, port, t.TempDir(), bin, args...)
	if err != nil {
		t.Fatalf("procs: start %s (%s): %v", name, bin, err)
	}
	p := &Proc{Name: name, Port: port, Addr: srv.Addr(), srv: srv,
		Client: redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 5 * time.Second})}
	t.Cleanup(func() {
		p.Client.Close()
		srv.Kill()
		if t.Failed() {
			t.Logf("procs: %s (%s) output:\n%s", name, p.Addr, srv.Log(40))
		}
	})
	return p
}

// Freeze stops the process (SIGSTOP): connections stay open, nothing is
// answered, replication stops.
func (p *Proc) Freeze() error { return p.srv.Freeze() }

// Thaw resumes a frozen process.
func (p *Proc) Thaw() error { return p.srv.Thaw() }

// Alive reports whether the process is still running.
func (p *Proc) Alive() bool { return p.srv.Alive() }

// Kill kills the process (SIGKILL, which ends a frozen one too) and waits
// for it to exit.
func (p *Proc) Kill() { p.srv.Kill() }

// Replica is a replica process whose replication link to its primary runs
// through a fault proxy, so that a test can stop replication cleanly.
type Replica struct {
	*Proc
	link *faultnet.Proxy
}

// ReplicaOf starts a replica of primary that announces 127.0.0.1, and waits
// until it is in sync.
func ReplicaOf(t testing.TB, name, bin string, primary *Proc, args ...string) *Replica {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	link, err := faultnet.Listen(primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	_, linkPort, _ := net.SplitHostPort(link.Addr())
	r := &Replica{link: link, Proc: Start(t, name, bin, port, append([]string{"--replicaof", "127.0.0.1", linkPort,
		"--replica-announce-ip", "127.0.0.1"}, args...)...)}
	r.WaitInSync(t)
	return r
}

// WaitInSync waits until the replica's link to its primary is up.
func (r *Replica) WaitInSync(t testing.TB) {
	t.Helper()
	WaitFor(t, 20*time.Second, r.Name+" in sync with its primary", func() (bool, error) {
		info, err := r.Client.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up"), nil
	})
}

// CutReplication stops the replication stream: the link is dropped, and
// the replica's attempts to reconnect go into a black hole. Nothing the
// primary writes from now on reaches the replica (unlike SIGSTOP, which
// leaves the stream in the replica's socket buffer, to be read on SIGCONT).
func (r *Replica) CutReplication() {
	r.link.SetBlackhole(true)
	r.link.DropConnections()
}

// RestoreReplication ends the cut: the stalled link is dropped, and the
// replica reconnects and catches up (partial resync).
func (r *Replica) RestoreReplication() {
	r.link.SetBlackhole(false)
	r.link.DropConnections()
}

// Sentinel starts a Sentinel that monitors each primary under the name
// masters[i], with quorum 1 (it decides alone), declaring a primary down
// after downAfter.
func Sentinel(t testing.TB, bin string, masters []string, primaries []*Proc, downAfter time.Duration) *Proc {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\nsentinel announce-ip 127.0.0.1\ndir %s\n", port, t.TempDir())
	for i, m := range masters {
		fmt.Fprintf(&b, "sentinel monitor %s 127.0.0.1 %d 1\n", m, primaries[i].Port)
		fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", m, downAfter.Milliseconds())
		fmt.Fprintf(&b, "sentinel failover-timeout %s 10000\n", m)
	}
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return Start(t, "sentinel", bin, port, conf)
}

// WaitFor polls cond every 20ms until it holds, failing the test after limit.
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("procs: %s: not true after %v (last error: %v)", what, limit, last)
}

// WaitAOFReady waits until the server has AOF on and no rewrite running or
// scheduled. A replica with AOF rewrites it after each full sync, and
// acknowledges no fsync (WAITAOF) until that is done.
func (p *Proc) WaitAOFReady(t testing.TB) {
	t.Helper()
	WaitFor(t, 30*time.Second, p.Name+"'s AOF ready", func() (bool, error) {
		info, err := p.Client.Info(context.Background(), "persistence").Result()
		return err == nil && strings.Contains(info, "aof_enabled:1") && strings.Contains(info, "aof_rewrite_in_progress:0") &&
			strings.Contains(info, "aof_rewrite_scheduled:0"), err
	})
}

// Cluster is a Redis Cluster of plain processes: masters, each with
// replicasEach replicas, every node announcing 127.0.0.1, failing over
// after a silent second (cluster-node-timeout 1000).
type Cluster struct {
	Nodes  []*Proc
	server string
}

// StartCluster starts masters×(1+replicasEach) cluster nodes of server and
// joins them with NAME-cli --cluster create, waiting until every node says
// cluster_state:ok.
func StartCluster(t testing.TB, server string, masters, replicasEach int, args ...string) *Cluster {
	t.Helper()
	bin := Binary(t, server, "server")
	c := &Cluster{server: server}
	var addrs []string
	for i := range masters * (1 + replicasEach) {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		p := Start(t, fmt.Sprintf("cluster node %d", i), bin, port, append([]string{"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
			"--cluster-announce-ip", "127.0.0.1", "--cluster-port", strconv.Itoa(BusPort(port)),
			"--save", "", "--appendonly", "no"}, args...)...)
		c.Nodes = append(c.Nodes, p)
		addrs = append(addrs, p.Addr)
	}
	cli := Binary(t, server, "cli")
	create := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", strconv.Itoa(replicasEach), "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("procs: %s --cluster create: %v\n%s", cli, err, out)
	}
	for _, p := range c.Nodes {
		WaitFor(t, 30*time.Second, p.Name+" sees the cluster ok", func() (bool, error) {
			info, err := p.Client.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok"), err
		})
	}
	return c
}

// AddMaster starts one more cluster node and joins it to the cluster
// (CLUSTER MEET) as a master that serves no slot, waiting until every
// node knows it and it sees the cluster ok.
func (c *Cluster) AddMaster(t testing.TB, args ...string) *Proc {
	t.Helper()
	bin := Binary(t, c.server, "server")
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := Start(t, fmt.Sprintf("cluster node %d (added)", len(c.Nodes)), bin, port, append([]string{"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
		"--cluster-announce-ip", "127.0.0.1", "--cluster-port", strconv.Itoa(BusPort(port)),
		"--save", "", "--appendonly", "no"}, args...)...)
	ctx := context.Background()
	if err := c.Nodes[0].Client.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", port, BusPort(port)).Err(); err != nil {
		t.Fatalf("procs: CLUSTER MEET %s: %v", p.Addr, err)
	}
	id, err := p.Client.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	c.Nodes = append(c.Nodes, p)
	for _, n := range c.Nodes {
		if !n.Alive() {
			continue
		}
		WaitFor(t, 30*time.Second, n.Name+" knows the added node", func() (bool, error) {
			nodes, err := n.Client.ClusterNodes(ctx).Result()
			return err == nil && strings.Contains(nodes, id), err
		})
	}
	WaitFor(t, 30*time.Second, p.Name+" sees the cluster ok", func() (bool, error) {
		info, err := p.Client.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok"), err
	})
	return p
}

// Addrs returns every node's address, for a ClusterClient.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, p := range c.Nodes {
		out[i] = p.Addr
	}
	return out
}

// ByAddr returns the node at addr.
func (c *Cluster) ByAddr(addr string) *Proc {
	for _, p := range c.Nodes {
		if p.Addr == addr {
			return p
		}
	}
	return nil
}

// MasterOfSlot returns the master that the first live node asked says
// serves slot (CLUSTER SLOTS).
func (c *Cluster) MasterOfSlot(ctx context.Context, slot int64) (*Proc, error) {
	var last error = errors.New("no live node")
	for _, n := range c.Nodes {
		if !n.Alive() {
			continue
		}
		addr, err := ownerOf(ctx, n.Client, slot)
		if err != nil {
			last = err
			continue
		}
		if addr == "" {
			return nil, fmt.Errorf("procs: %s says no node serves slot %d", n.Name, slot)
		}
		if p := c.ByAddr(addr); p != nil {
			return p, nil
		}
		return nil, fmt.Errorf("procs: slot %d's master %s is not a node of the cluster", slot, addr)
	}
	return nil, last
}

// Masters returns the live nodes whose ROLE is master.
func (c *Cluster) Masters(ctx context.Context) ([]*Proc, error) {
	var out []*Proc
	for _, n := range c.Nodes {
		if !n.Alive() {
			continue
		}
		role, err := n.Client.Do(ctx, "ROLE").Slice()
		if err != nil {
			return nil, fmt.Errorf("procs: ROLE of %s: %w", n.Name, err)
		}
		if len(role) > 0 && role[0] == "master" {
			out = append(out, n)
		}
	}
	return out, nil
}

// ReplicasOf returns the live nodes that replicate master (INFO replication).
func (c *Cluster) ReplicasOf(ctx context.Context, master *Proc) ([]*Proc, error) {
	var out []*Proc
	for _, n := range c.Nodes {
		if n == master || !n.Alive() {
			continue
		}
		info, err := n.Client.Info(ctx, "replication").Result()
		if err != nil {
			return nil, err
		}
		if strings.Contains(info, "role:slave") && strings.Contains(info, fmt.Sprintf("master_port:%d\r\n", master.Port)) {
			out = append(out, n)
		}
	}
	return out, nil
}

// Reshard moves slots hash slots from one master to another with the real
// NAME-cli --cluster reshard, which takes the lowest-numbered slots of from
// first, and returns how long it ran.
func (c *Cluster) Reshard(ctx context.Context, from, to *Proc, slots int) (time.Duration, error) {
	fromID, err := from.Client.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return 0, err
	}
	toID, err := to.Client.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return 0, err
	}
	cli, err := binaryPath(c.server, "cli")
	if err != nil {
		return 0, err
	}
	start := time.Now()
	out, err := exec.CommandContext(ctx, cli, "--cluster", "reshard", from.Addr, "--cluster-from", fromID, "--cluster-to", toID,
		"--cluster-slots", strconv.Itoa(slots), "--cluster-yes").CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return took, fmt.Errorf("procs: %s --cluster reshard: %w\n%s", cli, err, redisproc.Tail(string(out), 30))
	}
	return took, nil
}

// Client returns a ClusterClient over every node, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), DialTimeout: time.Second})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// SlotMove moves one hash slot from its master (Source) to another master
// (Target) by the steps redis-cli --cluster reshard takes: Begin marks it
// IMPORTING on the target and MIGRATING on the source; Finish MIGRATEs its
// keys and assigns it to the target on every node.
type SlotMove struct {
	Slot           int64
	Source, Target *Proc
	cluster        *Cluster
	sourceID       string
	targetID       string
}

// MoveSlotOf prepares the move of key's slot to another master.
func (c *Cluster) MoveSlotOf(ctx context.Context, cc *redis.ClusterClient, key string) (*SlotMove, error) {
	return c.MoveSlotTo(ctx, cc, key, nil)
}

// MoveSlotTo prepares the move of key's slot to target (nil: another
// master).
func (c *Cluster) MoveSlotTo(ctx context.Context, cc *redis.ClusterClient, key string, target *Proc) (*SlotMove, error) {
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	master, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	m := &SlotMove{Slot: slot, cluster: c, Source: c.ByAddr(master.Options().Addr)}
	if m.Source == nil {
		return nil, fmt.Errorf("procs: the slot's master %s is not a node of the cluster", master.Options().Addr)
	}
	masters, err := c.Masters(ctx)
	if err != nil {
		return nil, err
	}
	m.Target = target
	for _, n := range masters {
		if m.Target == nil && n != m.Source {
			m.Target = n
		}
	}
	if m.Target == nil {
		return nil, errors.New("procs: no other master to move the slot to")
	}
	if m.sourceID, err = m.Source.Client.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
		return nil, err
	}
	if m.targetID, err = m.Target.Client.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
		return nil, err
	}
	return m, nil
}

// Begin marks the slot IMPORTING on the target and MIGRATING on the source.
func (m *SlotMove) Begin(ctx context.Context) error {
	if err := m.Target.Client.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "IMPORTING", m.sourceID).Err(); err != nil {
		return err
	}
	return m.Source.Client.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "MIGRATING", m.targetID).Err()
}

// Finish MIGRATEs the slot's keys to the target until none is left, then
// assigns the slot to the target on every master (SETSLOT NODE; replicas
// learn it from their masters).
func (m *SlotMove) Finish(ctx context.Context) error {
	_, port, _ := strings.Cut(m.Target.Addr, ":")
	for {
		keys, err := m.Source.Client.Do(ctx, "CLUSTER", "GETKEYSINSLOT", m.Slot, 100).StringSlice()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := m.Source.Client.Do(ctx, args...).Err(); err != nil && !strings.Contains(err.Error(), "NOKEY") {
			return err
		}
	}
	masters, err := m.cluster.Masters(ctx)
	if err != nil {
		return err
	}
	for _, n := range masters {
		if err := n.Client.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.targetID).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Atomically moves the slot with the server's own atomic slot migration
// (Valkey 9: CLUSTER MIGRATESLOTS on the source, which streams the slot's
// keys to the target while the source keeps serving them, then hands the
// slot over in one step) instead of Begin and Finish, and returns once the
// source reports the migration's success and every master names the target
// as the slot's owner. No ASK or TRYAGAIN is ever answered on the way.
func (m *SlotMove) Atomically(ctx context.Context) error {
	if err := m.Source.Client.Do(ctx, "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", m.Slot, m.Slot, "NODE", m.targetID).Err(); err != nil {
		return fmt.Errorf("procs: CLUSTER MIGRATESLOTS of slot %d: %w", m.Slot, err)
	}
	for {
		state, err := m.exportState(ctx)
		if err != nil {
			return err
		}
		if state == "success" {
			break
		}
		if state == "failed" || state == "cancelled" {
			return fmt.Errorf("procs: the atomic migration of slot %d ended %s", m.Slot, state)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("procs: the atomic migration of slot %d still %q: %w", m.Slot, state, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	for {
		settled := true
		masters, err := m.cluster.Masters(ctx)
		if err != nil {
			return err
		}
		for _, n := range masters {
			owner, err := ownerOf(ctx, n.Client, m.Slot)
			if err != nil {
				return err
			}
			settled = settled && owner == m.Target.Addr
		}
		if settled {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("procs: slot %d migrated, but not every master names its new owner: %w", m.Slot, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// exportState is the state the source reports of its export of the slot
// to the target (CLUSTER GETSLOTMIGRATIONS: the latest such entry).
func (m *SlotMove) exportState(ctx context.Context) (string, error) {
	entries, err := m.Source.Client.Do(ctx, "CLUSTER", "GETSLOTMIGRATIONS").Slice()
	if err != nil {
		return "", fmt.Errorf("procs: CLUSTER GETSLOTMIGRATIONS: %w", err)
	}
	want := fmt.Sprintf("%d-%d", m.Slot, m.Slot)
	state := ""
	for _, e := range entries {
		fields := map[string]string{}
		switch e := e.(type) {
		case []any:
			for i := 0; i+1 < len(e); i += 2 {
				fields[fmt.Sprint(e[i])] = fmt.Sprint(e[i+1])
			}
		case map[any]any:
			for k, v := range e {
				fields[fmt.Sprint(k)] = fmt.Sprint(v)
			}
		}
		if fields["operation"] == "EXPORT" && fields["target_node"] == m.targetID && strings.Contains(fields["slot_ranges"], want) {
			state = fields["state"]
		}
	}
	if state == "" {
		return "", fmt.Errorf("procs: the source lists no export of slot %d to %s: %v", m.Slot, m.targetID, entries)
	}
	return state, nil
}

// ownerOf is the address of the master that c says serves slot (CLUSTER
// SLOTS), "" where it names none.
func ownerOf(ctx context.Context, c *redis.Client, slot int64) (string, error) {
	ranges, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", nil
}

// WithoutKeys hands the slot to the target without its keys, as a botched
// migration would: the source drops them (CLUSTER FLUSHSLOT, Valkey 9) and
// gives the slot to the target in one transaction (so that no client
// writes the slot in between), then every other master assigns it too
// (SETSLOT NODE). The negative control of the migration tests: leases in
// the slot are lost.
func (m *SlotMove) WithoutKeys(ctx context.Context) error {
	tx := m.Source.Client.TxPipeline()
	tx.Do(ctx, "CLUSTER", "FLUSHSLOT", m.Slot)
	tx.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.targetID)
	if _, err := tx.Exec(ctx); err != nil {
		return fmt.Errorf("procs: CLUSTER FLUSHSLOT %d and SETSLOT NODE on the source: %w", m.Slot, err)
	}
	masters, err := m.cluster.Masters(ctx)
	if err != nil {
		return err
	}
	for _, n := range masters {
		if n == m.Source {
			continue
		}
		if err := n.Client.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.targetID).Err(); err != nil {
			return err
		}
	}
	return nil
}
