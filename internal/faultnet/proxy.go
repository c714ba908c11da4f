// Package faultnet is a TCP proxy for tests that puts network faults between
// a client and one server: delay per direction, a black hole that accepts and
// never answers (a hung node), a partition that drops every connection, and a
// cut that lets a request reach the server but loses its reply.
//
// It listens on 127.0.0.1 only and is for tests; nothing outside tests and
// test tools imports it.
package faultnet

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from its own loopback address to a target.
type Proxy struct {
	ln net.Listener

	mu        sync.Mutex
	target    string
	up, down  time.Duration // delay client->server, server->client
	blackhole bool
	refuse    bool // close new connections at once, like a stopped server
	cuts      int  // replies still to lose, each closing its connection
	conns     map[net.Conn]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// Listen starts a proxy to target on a free 127.0.0.1 port.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address, to give to the client.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget sends new connections to target from now on; open ones stay
// with the old target (a DNS name or a proxy that moved to a new primary,
// while clients keep their connections to the old one).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// SetDelay delays every chunk sent from now on: up for client to server, down
// for server to client. Order within a connection is kept.
func (p *Proxy) SetDelay(up, down time.Duration) {
	p.mu.Lock()
	p.up, p.down = up, down
	p.mu.Unlock()
}

// SetBlackhole makes the proxy swallow all traffic in both directions while on:
// connections are accepted and kept open, and nothing is answered. This is a
// hung node, or one on the far side of a silent partition.
func (p *Proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
}

// SetDown makes the proxy act as a stopped server while on: open
// connections are dropped, and new ones are closed as soon as accepted.
func (p *Proxy) SetDown(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
	if on {
		p.DropConnections()
	}
}

// CutReplies makes the next n replies from the server be lost: each is
// dropped and its connection closed, after the request it answers has reached
// and been executed by the server. A client that retries on a broken
// connection sends the request again.
func (p *Proxy) CutReplies(n int) {
	p.mu.Lock()
	p.cuts += n
	p.mu.Unlock()
}

// DropConnections closes every open connection (a partition's effect on
// established connections); new ones are still accepted.
func (p *Proxy) DropConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.DropConnections()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, target := p.refuse, p.target
		p.mu.Unlock()
		if refuse {
			client.Close()
			continue
		}
		server, err := net.Dial("tcp", target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			client.Close()
			server.Close()
			return
		}
		p.wg.Add(2)
		go p.pump(client, server, true)
		go p.pump(server, client, false)
	}
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
		c.Close()
	}
}

type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst, applying the faults of its direction. A reader
// stamps each chunk with its due time and a writer sends it then, so delays
// keep the order of the stream.
func (p *Proxy) pump(src, dst net.Conn, upstream bool) {
	defer p.wg.Done()
	defer p.untrack(src, dst)
	queue := make(chan chunk, 1024)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for c := range queue {
			sleepUntil(c.due)
			if _, err := dst.Write(c.data); err != nil {
				src.Close()
				for range queue { // drain so the reader never blocks
				}
				return
			}
		}
	}()
	defer func() { close(queue); <-writerDone }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			delay, hole, cut := p.down, p.blackhole, false
			if upstream {
				delay = p.up
			} else if p.cuts > 0 && !hole {
				p.cuts--
				cut = true
			}
			p.mu.Unlock()
			switch {
			case cut:
				return // lose the reply and close both sides
			case hole:
				continue
			}
			queue <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay)}
		}
		if err != nil { // EOF, reset or closed: the stream is over
			return
		}
	}
}
