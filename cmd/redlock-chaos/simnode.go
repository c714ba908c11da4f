package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// simNode is one simulated Redis node: a miniredis server (a process, as
// far as the simulation goes: a restart is a new one) that clients reach
// only through simulated connections (simconn.go), with a clock of its own
// and the fault state the nemesis sets. Everything it does runs inside a
// testing/synctest bubble, so its timers and its clock are virtual.
type simNode struct {
	id    int
	clock *nodeClock

	// replicas is what the node's primary says of its replicas: one in a
	// run with failovers (each node has a replica there, as in the real
	// runs), none otherwise.
	replicas int
	// mayEvict: the node runs with an eviction policy (INFO memory says
	// so from its start); evictions happen only under the nemesis's
	// evict and pressure faults.
	mayEvict bool

	mu        sync.Mutex
	srv       *miniredis.Miniredis
	proc      *simProcess   // what the current server process says of itself (INFO)
	down      bool          // killed, or partitioned: dials fail, connections are gone
	frozen    chan struct{} // non-nil while frozen (SIGSTOP); closed at the thaw
	blackhole bool          // everything sent either way is swallowed
	delay     time.Duration // every reply arrives this much later
	loss      float64       // the chance that a reply is lost after the command ran (and the connection reset)
	rng       *rand.Rand
	conns     map[*simConn]struct{}
}

// errRefused is a dial to a node that is down or cut off.
var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

func newSimNode(id int, clock *nodeClock, seed uint64, replicas int, mayEvict bool) *simNode {
	n := &simNode{id: id, clock: clock, replicas: replicas, mayEvict: mayEvict, rng: rand.New(rand.NewPCG(seed, uint64(id))), conns: map[*simConn]struct{}{}}
	n.srv, n.proc = n.newProcess(nil)
	return n
}

// newProcess starts a new server process for the node, empty: TTLs and
// TIME follow the node's clock (SetTime before every command: see tick).
// It continues prev's replication history where prev is set (a promoted
// replica).
func (n *simNode) newProcess(prev *simProcess) (*miniredis.Miniredis, *simProcess) {
	m := miniredis.NewMiniRedis()
	m.SetTime(n.clock.now())
	m.ClockTTL(true)
	p := &simProcess{run: n.hex(), replid: n.hex(), replid2: strings.Repeat("0", 40), started: n.clock.now()}
	if prev != nil {
		p.replid2, p.fed = prev.replid, 1<<20
	}
	if c, err := m.Dial(); err == nil { // the server starts with its first connection
		c.Close()
	}
	m.Server().SetPreHook(func(c *server.Peer, cmd string, args ...string) bool {
		if cmd != "INFO" {
			return false
		}
		c.WriteBulk(n.info(p, args))
		return true
	})
	return m, p
}

// hex is 40 random hex digits, as Redis's run_id and replid.
func (n *simNode) hex() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var b [20]byte
	for i := range b {
		b[i] = byte(n.rng.Uint32())
	}
	return fmt.Sprintf("%x", b)
}

// simProcess is what a simulated server process says of itself in INFO,
// as Redis 7 does: the guard's examination (examine.lua) reads it to tell
// a new process, a promoted replica or an old snapshot from the memory it
// examined. miniredis itself answers no INFO server, replication or
// persistence.
type simProcess struct {
	run, replid, replid2 string
	started              time.Time // by the node's clock
	fed                  int64     // bytes read from a primary: a promoted replica's
	loaded               int       // keys loaded from a snapshot at the start
	evicted              atomic.Int64
}

// info is the process's reply to INFO sections.
func (n *simNode) info(p *simProcess, sections []string) string {
	if len(sections) == 0 {
		sections = []string{"server", "replication", "stats", "memory", "persistence"}
	}
	var b strings.Builder
	for _, s := range sections {
		switch strings.ToLower(s) {
		case "server":
			fmt.Fprintf(&b, "# Server\r\nredis_version:7.2.4\r\nprocess_id:%d\r\nrun_id:%s\r\nuptime_in_seconds:%d\r\n\r\n",
				1000+n.id, p.run, int64(n.clock.now().Sub(p.started)/time.Second))
		case "replication":
			fmt.Fprintf(&b, "# Replication\r\nrole:master\r\nconnected_slaves:%d\r\nmaster_replid:%s\r\nmaster_replid2:%s\r\n\r\n", n.replicas, p.replid, p.replid2)
		case "stats":
			fmt.Fprintf(&b, "# Stats\r\ntotal_net_repl_input_bytes:%d\r\nevicted_keys:%d\r\n\r\n", p.fed, p.evicted.Load())
		case "memory":
			limit, policy := 0, "noeviction"
			if n.mayEvict {
				limit, policy = 1<<20, "allkeys-random"
			}
			fmt.Fprintf(&b, "# Memory\r\nmaxmemory:%d\r\nmaxmemory_policy:%s\r\n\r\n", limit, policy)
		case "persistence":
			fmt.Fprintf(&b, "# Persistence\r\naof_enabled:0\r\nrdb_last_load_keys_loaded:%d\r\n\r\n", p.loaded)
		}
	}
	return b.String()
}

// tick sets the server's time to the node's clock: miniredis expires keys
// and answers TIME by it. Called before every command reaches the server.
// (The node's lock is never held while calling into the server: the
// server's own lock may be held by a command whose reply is waiting for
// this node's pumps.)
func (n *simNode) tick() {
	n.server()
}

// dial opens a connection to the node, as a client's dialer does.
func (n *simNode) dial() (net.Conn, error) {
	n.mu.Lock()
	down, m := n.down, n.srv
	n.mu.Unlock()
	if down {
		return nil, errRefused
	}
	server, err := m.Dial()
	if err != nil {
		return nil, err
	}
	probe, peer, err := newProbe()
	if err != nil {
		server.Close()
		return nil, err
	}
	client, mine := net.Pipe()
	c := newSimConn(n, mine, server, peer)
	n.mu.Lock()
	if n.down || n.srv != m { // killed or cut off meanwhile
		n.mu.Unlock()
		c.close()
		syscall.Close(probe)
		return nil, errRefused
	}
	n.conns[c] = struct{}{}
	n.mu.Unlock()
	c.start()
	return &clientConn{Conn: client, probe: probe}, nil
}

// dropConnections resets every connection to the node.
func (n *simNode) dropConnections() {
	n.mu.Lock()
	conns := make([]*simConn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

func (n *simNode) forget(c *simConn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}

// gate is what a command meets on its way to the server: it waits while
// the node is frozen, and says whether the command is swallowed.
func (n *simNode) gate() (swallowed bool) {
	for {
		n.mu.Lock()
		frozen, blackhole := n.frozen, n.blackhole
		n.mu.Unlock()
		if frozen == nil {
			return blackhole
		}
		<-frozen
	}
}

// replyFate is what becomes of a reply on its way back: how late it
// arrives, or whether it is swallowed (blackhole) or lost with its
// connection.
func (n *simNode) replyFate() (delay time.Duration, swallowed, lost bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.delay, n.blackhole, n.loss > 0 && n.rng.Float64() < n.loss
}

// kill stops the server process: its connections reset, dials refused,
// its memory gone (a restart without persistence comes from restart).
func (n *simNode) kill() {
	n.mu.Lock()
	n.down = true
	old := n.srv
	n.mu.Unlock()
	n.dropConnections()
	old.Close()
}

// restart starts a new process, empty or from snap, and lets clients in.
// promoted makes it a replica promoted in the old process's stead: it
// continues the old process's replication history and has read a stream.
func (n *simNode) restart(snap *snapshot, promoted bool) {
	var prev *simProcess
	if promoted {
		n.mu.Lock()
		prev = n.proc
		n.mu.Unlock()
	}
	m, p := n.newProcess(prev)
	if snap != nil {
		p.loaded = snap.restore(m, n.clock.now())
		if promoted {
			p.loaded = 0 // a replica's memory came by the stream, not from a file
		}
	}
	n.mu.Lock()
	n.srv, n.proc, n.down = m, p, false
	n.mu.Unlock()
}

// partition cuts the node off: connections reset, dials refused; the
// server process goes on (its keys expire meanwhile).
func (n *simNode) partition(on bool) {
	n.locked(func() { n.down = on })
	if on {
		n.dropConnections()
	}
}

// freeze stops the node's server from taking commands (SIGSTOP) until thaw.
func (n *simNode) freeze() {
	n.locked(func() {
		if n.frozen == nil {
			n.frozen = make(chan struct{})
		}
	})
}

func (n *simNode) thaw() {
	n.locked(func() {
		if n.frozen != nil {
			close(n.frozen)
			n.frozen = nil
		}
	})
}

// setBlackhole swallows everything sent either way while on; at its end
// every connection is reset (what was swallowed leaves none in step).
func (n *simNode) setBlackhole(on bool) {
	n.locked(func() { n.blackhole = on })
	if !on {
		n.dropConnections()
	}
}

func (n *simNode) setDelay(d time.Duration) { n.locked(func() { n.delay = d }) }

func (n *simNode) setLoss(p float64) { n.locked(func() { n.loss = p }) }

// locked runs f, which sets the node's fault state, under the node's lock.
func (n *simNode) locked(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f()
}

// server is the node's current process.
func (n *simNode) server() *miniredis.Miniredis {
	n.mu.Lock()
	m := n.srv
	n.mu.Unlock()
	m.SetTime(n.clock.now())
	return m
}

// flushScripts empties the node's script cache: SCRIPT FLUSH, dispatched
// to the server directly (as miniredis runs a script's redis.call), not
// through the node's network: an operator's redis-cli on the host.
func (n *simNode) flushScripts() {
	m := n.server()
	m.Server().Dispatch(server.NewPeer(bufio.NewWriter(io.Discard)), []string{"SCRIPT", "FLUSH"})
}

// evictOne deletes one key at random, as allkeys-random eviction does.
func (n *simNode) evictOne() {
	m := n.server()
	keys := m.Keys()
	if len(keys) == 0 {
		return
	}
	n.mu.Lock()
	k, p := keys[n.rng.IntN(len(keys))], n.proc
	n.mu.Unlock()
	if m.Del(k) {
		p.evicted.Add(1)
	}
}

// nodeClock is a node's wall clock: it starts at an offset from the
// bubble's clock, runs at a rate (1: in step), and steps when the nemesis
// says so. Redis expires keys by it.
type nodeClock struct {
	mu      sync.Mutex
	at      time.Time // the bubble's clock at the last change of rate or step
	reading time.Time // the node's clock then
	rate    float64
}

func newNodeClock(offset time.Duration) *nodeClock {
	now := time.Now()
	return &nodeClock{at: now, reading: now.Add(offset), rate: 1}
}

func (c *nodeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *nodeClock) nowLocked() time.Time {
	return c.reading.Add(time.Duration(float64(time.Since(c.at)) * c.rate))
}

// step moves the clock by d at once (an NTP step, date -s).
func (c *nodeClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading, c.at = c.nowLocked().Add(d), time.Now()
}

// setRate makes the clock run rate times as fast as real time from now.
func (c *nodeClock) setRate(rate float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading, c.at, c.rate = c.nowLocked(), time.Now(), rate
}

// snapshot is a node's memory at one moment, as an RDB file holds it:
// every key with its value and its absolute expiry by the node's clock.
type snapshot struct {
	keys []savedKey
}

type savedKey struct {
	name    string
	kind    string
	str     string
	list    []string
	hash    map[string]string
	set     []string
	zset    map[string]float64
	expires time.Time // zero: no expiry
}

// save takes a snapshot of the node's current process (SAVE).
func (n *simNode) save() *snapshot {
	m := n.server()
	now := n.clock.now()
	s := &snapshot{}
	for _, k := range m.Keys() {
		sk := savedKey{name: k, kind: m.Type(k)}
		if ttl := m.TTL(k); ttl > 0 {
			sk.expires = now.Add(ttl)
		}
		switch sk.kind {
		case "string":
			sk.str, _ = m.Get(k)
		case "list":
			sk.list, _ = m.List(k)
		case "hash":
			fields, _ := m.HKeys(k)
			sk.hash = map[string]string{}
			for _, f := range fields {
				sk.hash[f] = m.HGet(k, f)
			}
		case "set":
			sk.set, _ = m.Members(k)
		case "zset":
			sk.zset, _ = m.SortedSet(k)
		default:
			continue // none of the library's keys
		}
		s.keys = append(s.keys, sk)
	}
	return s
}

// restore loads the snapshot into m, whose clock reads now: keys whose
// expiry has passed are not loaded, as Redis drops them on load. It
// returns the keys loaded.
func (s *snapshot) restore(m *miniredis.Miniredis, now time.Time) int {
	loaded := 0
	for _, k := range s.keys {
		if !k.expires.IsZero() && !k.expires.After(now) {
			continue
		}
		loaded++
		switch k.kind {
		case "string":
			m.Set(k.name, k.str)
		case "list":
			m.RPush(k.name, k.list...)
		case "hash":
			for f, v := range k.hash {
				m.HSet(k.name, f, v)
			}
		case "set":
			m.SetAdd(k.name, k.set...)
		case "zset":
			for member, score := range k.zset {
				m.ZAdd(k.name, score, member)
			}
		}
		if !k.expires.IsZero() {
			m.SetTTL(k.name, k.expires.Sub(now))
		}
	}
	return loaded
}
