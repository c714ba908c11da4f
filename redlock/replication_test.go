package redlock_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock"
)

// replicaStub answers WAIT and WAITAOF on one in-process node as a primary
// with replicas would: acked replicas acknowledge (or, with err, the server
// refuses). It records every WAIT it was sent.
type replicaStub struct {
	acked atomic.Int32
	local atomic.Int32 // WAITAOF's local fsync count
	err   atomic.Pointer[string]
	mu    sync.Mutex
	waits [][]string
}

func (r *replicaStub) hook(p *server.Peer, cmd string, args ...string) bool {
	cmd = strings.ToUpper(cmd)
	if cmd != "WAIT" && cmd != "WAITAOF" {
		return false
	}
	r.mu.Lock()
	r.waits = append(r.waits, append([]string{cmd}, args...))
	r.mu.Unlock()
	if e := r.err.Load(); e != nil {
		p.WriteError(*e)
		return true
	}
	if cmd == "WAITAOF" {
		p.WriteLen(2)
		p.WriteInt(int(r.local.Load()))
	}
	p.WriteInt(int(r.acked.Load()))
	return true
}

func (r *replicaStub) sent() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]string(nil), r.waits...)
}

// replicated returns a cluster of n nodes whose WAITs the stubs answer, each
// with acked replicas acknowledging.
func replicated(t *testing.T, n int, acked int32) (*cluster, []*replicaStub) {
	c := newCluster(t, n)
	stubs := make([]*replicaStub, n)
	for i, m := range c.servers {
		stubs[i] = &replicaStub{}
		stubs[i].acked.Store(acked)
		stubs[i].local.Store(1)
		m.Server().SetPreHook(stubs[i].hook)
	}
	return c, stubs
}

// noKeyLeft drains l and fails the test if a node still has key.
func noKeyLeft(t *testing.T, l *redlock.Locker, c *cluster, key string) {
	t.Helper()
	drain(t, l)
	for i, m := range c.servers {
		if m.Exists(key) {
			t.Errorf("node %d: %s left by the refused attempt", i, key)
		}
	}
}

func waitsSent(stubs []*replicaStub) int {
	n := 0
	for _, s := range stubs {
		n += len(s.sent())
	}
	return n
}

// With WaitReplicas, a grant counts once the node's replicas acknowledged
// it: acquire, extend and fencing pass when they do; a majority of nodes
// whose replicas fall short fails the acquisition with ErrNotReplicated
// (never contention), and the keys those nodes set are released. Release
// and Check send no WAIT, and the WAIT's timeout is half the NodeTimeout.
func TestWaitReplicas(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "fenced"}[fencing], func(t *testing.T) {
			c, stubs := replicated(t, 5, 1)
			l := newLocker(t, c.nodes(nil), &redlock.Options{WaitReplicas: 1, Fencing: fencing, NodeTimeout: 2 * time.Second})
			lease, err := l.TryLock(t.Context(), "k", time.Minute)
			if err != nil {
				t.Fatalf("TryLock with every replica acknowledging: %v", err)
			}
			drain(t, l) // the WAITs of nodes that answered after the decision
			for i, s := range stubs {
				w := s.sent()
				if len(w) == 0 {
					t.Fatalf("node %d: no WAIT sent", i)
				}
				if got := strings.Join(w[0], " "); got != "WAIT 1 1000" {
					t.Errorf("node %d: sent %q; want WAIT 1 1000 (half the NodeTimeout)", i, got)
				}
			}
			if err := lease.Extend(t.Context(), time.Minute); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			drain(t, l)
			before := waitsSent(stubs)
			if err := lease.Check(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := lease.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			drain(t, l)
			if n := waitsSent(stubs) - before; n != 0 {
				t.Errorf("Check and Unlock sent %d WAITs; want none", n)
			}

			for _, s := range stubs[:3] {
				s.acked.Store(0) // replication stopped on three nodes
			}
			_, err = l.TryLock(t.Context(), "k", time.Minute)
			if !errors.Is(err, redlock.ErrNotReplicated) || errors.Is(err, redlock.ErrNotObtained) {
				t.Fatalf("TryLock with three nodes unreplicated: %v; want ErrNotReplicated, not ErrNotObtained", err)
			}
			if !strings.Contains(err.Error(), "0 of 1 replicas") {
				t.Errorf("%v: does not say how many replicas acknowledged", err)
			}
			noKeyLeft(t, l, c, "k")
		})
	}
}

// An extension whose grants are not replicated fails with ErrNotReplicated
// and keeps the lease (nothing refuted it); Do retries it.
func TestWaitReplicasExtend(t *testing.T) {
	c, stubs := replicated(t, 3, 1)
	l := newLocker(t, c.nodes(nil), &redlock.Options{WaitReplicas: 1})
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stubs[:2] {
		s.acked.Store(0)
	}
	err = lease.Extend(t.Context(), time.Minute)
	if !errors.Is(err, redlock.ErrNotReplicated) {
		t.Fatalf("Extend: %v; want ErrNotReplicated", err)
	}
	if err := lease.Check(t.Context()); err != nil {
		t.Errorf("the lease after an unreplicated extension: %v; want it still held", err)
	}
	if err := lease.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// WaitAOF sends WAITAOF 1 WaitReplicas; an unacknowledged local fsync fails
// the vote with ErrNotReplicated; a server without WAITAOF, or with AOF off,
// fails it with an error that says so, never silently waiting for less.
func TestWaitAOF(t *testing.T) {
	c, stubs := replicated(t, 3, 1)
	l := newLocker(t, c.nodes(nil), &redlock.Options{WaitReplicas: 1, WaitAOF: true, NodeTimeout: time.Second})
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	if err != nil {
		t.Fatalf("TryLock with fsyncs acknowledged: %v", err)
	}
	drain(t, l)
	if got := strings.Join(stubs[0].sent()[0], " "); got != "WAITAOF 1 1 500" {
		t.Errorf("sent %q; want WAITAOF 1 1 500 (half the NodeTimeout, in ms)", got)
	}
	if err := lease.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, reply string
		local       int32
		want        error
		says        string
	}{
		{"local fsync missing", "", 0, redlock.ErrNotReplicated, "0 of 1 local fsync"},
		{"Redis 7.0", "ERR unknown command 'WAITAOF', with args beginning with: '1' '1' '500' ", 1, nil, "needs Redis 7.2 or newer"},
		{"appendonly no", "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.", 1, nil, "appendonly no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range stubs {
				s.local.Store(tc.local)
				if tc.reply != "" {
					s.err.Store(&tc.reply)
				} else {
					s.err.Store(nil)
				}
			}
			_, err := l.TryLock(t.Context(), "k", time.Minute)
			if err == nil || errors.Is(err, redlock.ErrNotObtained) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("TryLock: %v; want a failure saying %q", err, tc.says)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("TryLock: %v; want %v", err, tc.want)
			}
			noKeyLeft(t, l, c, "k")
		})
	}
}

// Without WaitReplicas nothing waits; with it, New refuses nodes that cannot
// carry the WAIT on the command's connection, and a negative count.
func TestWaitReplicasOptions(t *testing.T) {
	c, stubs := replicated(t, 3, 1)
	l := newLocker(t, c.nodes(nil), nil)
	lease, err := l.TryLock(t.Context(), "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(t.Context(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	drain(t, l)
	if n := waitsSent(stubs); n != 0 {
		t.Errorf("%d WAITs without WaitReplicas", n)
	}

	wrapped := c.nodes(func(_ int, n redlock.Node) redlock.Node { return &hookNode{Node: n} })
	if _, err := redlock.New(wrapped, &redlock.Options{WaitReplicas: 1}); err == nil || !strings.Contains(err.Error(), "WaitReplicas") {
		t.Errorf("New with a wrapper node and WaitReplicas: %v; want an error naming WaitReplicas", err)
	}
	if _, err := redlock.New(c.nodes(nil), &redlock.Options{WaitReplicas: -1}); err == nil || !strings.Contains(err.Error(), "WaitReplicas is -1") {
		t.Errorf("New with WaitReplicas -1: %v", err)
	}
}

// After a node lost its script cache, the script runs again as EVAL and is
// followed by a WAIT of its own, whose verdict decides the grant.
func TestWaitReplicasAfterNoscript(t *testing.T) {
	for _, acked := range []int32{1, 0} {
		c, _ := replicated(t, 3, acked)
		l := newLocker(t, c.nodes(nil), &redlock.Options{WaitReplicas: 1, Fencing: true})
		for _, cl := range c.clients {
			if err := cl.ScriptFlush(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		lease, err := l.TryLock(t.Context(), "k", time.Minute)
		if acked == 1 {
			if err != nil {
				t.Fatalf("fenced TryLock after SCRIPT FLUSH, replicas acknowledging: %v", err)
			}
			_ = lease.Unlock(t.Context())
			continue
		}
		if !errors.Is(err, redlock.ErrNotReplicated) {
			t.Fatalf("fenced TryLock after SCRIPT FLUSH, no replica acknowledging: %v; want ErrNotReplicated", err)
		}
	}
}

// Sentinel-backed clients all report the address "FailoverClient": New tells
// them apart by value, not by that address.
func TestFailoverClientsAreDistinctNodes(t *testing.T) {
	var nodes []redlock.Node
	for _, m := range []string{"m0", "m1", "m2"} {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: m, SentinelAddrs: []string{"127.0.0.1:1"}})
		t.Cleanup(func() { c.Close() })
		nodes = append(nodes, c)
	}
	if _, err := redlock.New(nodes, &redlock.Options{WaitReplicas: 1, Fencing: true}); err != nil {
		t.Fatalf("New with three failover clients: %v", err)
	}
	if _, err := redlock.New([]redlock.Node{nodes[0], nodes[0]}, nil); err == nil {
		t.Error("New with one failover client twice: no error")
	}
}
