package main

import (
	"bytes"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// simConn is one client connection to a simulated node. The client holds
// one end of a net.Pipe (whose reads and writes block durably in a
// synctest bubble, and honour go-redis's deadlines on the bubble's clock);
// one pump takes the client's commands at once (as a socket's buffer does:
// a client's write never waits on the node), another carries them to the
// server process through the node's faults, a third carries the replies
// back, and a fourth hands each reply to the client at its time: latency
// delays every reply by the same time without queueing one behind
// another's delay, as a slow link does.
//
// That a write never waits on the node matters beyond fidelity: go-redis
// holds a PubSub's mutex while it writes a SUBSCRIBE, and a goroutine
// waiting on a mutex is not durably blocked in a synctest bubble, so a
// write stuck behind a frozen node would stop the bubble's clock. For the
// same reason a new connection's handshake (HELLO, which go-redis sends
// and reads back before anything else, under that mutex when the
// connection is a PubSub's) is answered at once, whatever the node's
// faults: the command after it meets them.
type simConn struct {
	node    *simNode
	probe   int         // the simulation's end of the client's probe (see clientConn)
	client  net.Conn    // this side of the client's pipe
	server  net.Conn    // the server process's connection
	sent    chan []byte // commands taken from the client, not yet at the server
	replies chan timedReply
	done    chan struct{}
	once    sync.Once
	// handshake is set while the connection's first command, a HELLO,
	// and its reply pass by the node's faults.
	handshake atomic.Bool
}

type timedReply struct {
	at   time.Time
	data []byte
}

func newSimConn(n *simNode, client, server net.Conn, probe int) *simConn {
	return &simConn{node: n, probe: probe, client: client, server: server, sent: make(chan []byte, 256), replies: make(chan timedReply, 256), done: make(chan struct{})}
}

func (c *simConn) start() {
	go c.take()
	go c.requests()
	go c.responses()
	go c.deliver()
}

// take reads the client's commands as they are written.
func (c *simConn) take() {
	buf := make([]byte, 32<<10)
	first := true
	for {
		k, err := c.client.Read(buf)
		if err != nil {
			c.close()
			return
		}
		if first {
			first = false
			c.handshake.Store(bytes.Contains(bytes.ToUpper(buf[:min(k, 16)]), []byte("HELLO")))
		}
		select {
		case c.sent <- slices.Clone(buf[:k]):
		case <-c.done:
			return
		}
	}
}

// requests carries the client's commands to the server: held while the
// node is frozen, swallowed while it is a black hole, and the node's clock
// set on the server before each reaches it.
func (c *simConn) requests() {
	for {
		var b []byte
		select {
		case b = <-c.sent:
		case <-c.done:
			return
		}
		if !c.handshake.Load() && c.node.gate() {
			continue
		}
		c.node.tick()
		if _, err := c.server.Write(b); err != nil {
			c.close()
			return
		}
	}
}

// responses carries the server's replies back: swallowed while the node is
// a black hole, lost with the connection when the node loses replies (the
// command ran; the client never hears), and otherwise queued for delivery
// after the node's delay.
func (c *simConn) responses() {
	buf := make([]byte, 32<<10)
	for {
		k, err := c.server.Read(buf)
		if err != nil {
			c.close()
			return
		}
		delay, swallowed, lost := c.node.replyFate()
		if c.handshake.Swap(false) {
			delay, swallowed, lost = 0, false, false
		}
		switch {
		case swallowed:
			continue
		case lost:
			c.close()
			return
		}
		select {
		case c.replies <- timedReply{at: time.Now().Add(delay), data: slices.Clone(buf[:k])}:
		case <-c.done:
			return
		}
	}
}

func (c *simConn) deliver() {
	for {
		var r timedReply
		select {
		case r = <-c.replies:
		case <-c.done:
			return
		}
		if wait := time.Until(r.at); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.done:
				t.Stop()
				return
			}
		}
		if _, err := c.client.Write(r.data); err != nil {
			c.close()
			return
		}
	}
}

// close resets the connection: both pipes close, and the client's next
// read or write fails.
func (c *simConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.client.Close()
		c.server.Close()
		syscall.Close(c.probe) // the client's probe now reads as closed by the peer
		c.node.forget(c)
	})
}

// clientConn is the client's end of a simulated connection. It offers
// go-redis's pool what a TCP socket offers before a pooled connection is
// reused: a file descriptor on which a peek says whether the peer has
// closed (go-redis's connCheck, MSG_PEEK|MSG_DONTWAIT), so that a
// connection a fault reset is dropped and redialled, not used and failed.
// (An in-process pipe has no descriptor: without this, every command sent
// on a stale connection failed, a release so failing left its key to
// expire, and the simulation saw lock keys left that TCP would not leave.)
// The descriptor is one end of a Unix socket pair that carries no data;
// the simulated connection closes the other end when it resets.
type clientConn struct {
	net.Conn
	probe int
	once  sync.Once
}

var _ syscall.Conn = (*clientConn)(nil)

func (c *clientConn) SyscallConn() (syscall.RawConn, error) { return probeConn(c.probe), nil }

func (c *clientConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { syscall.Close(c.probe) })
	return err
}

// probeConn runs a function on the probe's descriptor once: a peek that
// does not wait, as go-redis's is.
type probeConn int

func (p probeConn) Control(f func(fd uintptr)) error { f(uintptr(p)); return nil }

func (p probeConn) Read(f func(fd uintptr) bool) error {
	f(uintptr(p))
	return nil
}

func (p probeConn) Write(f func(fd uintptr) bool) error {
	f(uintptr(p))
	return nil
}

// newProbe is a socket pair for a connection's probe: the client's end,
// and the simulation's.
func newProbe() (client, sim int, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("a connection's probe: %w", err)
	}
	return fds[0], fds[1], nil
}
