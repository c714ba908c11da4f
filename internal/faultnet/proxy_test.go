package faultnet_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/faultnet"
)

// echo starts a line echo server that counts the lines it received.
func echo(t *testing.T) (addr string, lines chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lines = make(chan string, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					s, err := r.ReadString('\n')
					if err != nil {
						return
					}
					lines <- s
					if _, err := c.Write([]byte(s)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), lines
}

func dial(t *testing.T, p *faultnet.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(c net.Conn, r *bufio.Reader, deadline time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(deadline))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestProxy(t *testing.T) {
	addr, lines := echo(t)
	p, err := faultnet.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	c, r := dial(t, p)
	if s, err := roundTrip(c, r, 5*time.Second); err != nil || s != "ping\n" {
		t.Fatalf("plain round trip: %q, %v", s, err)
	}
	<-lines

	t.Run("delay", func(t *testing.T) {
		p.SetDelay(30*time.Millisecond, 20*time.Millisecond)
		defer p.SetDelay(0, 0)
		start := time.Now()
		if _, err := roundTrip(c, r, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		<-lines
		if took := time.Since(start); took < 50*time.Millisecond {
			t.Fatalf("round trip took %v, want >= 50ms", took)
		}
	})

	t.Run("blackhole", func(t *testing.T) {
		p.SetBlackhole(true)
		if _, err := roundTrip(c, r, 100*time.Millisecond); err == nil {
			t.Fatal("a black-holed round trip answered")
		}
		select {
		case s := <-lines:
			t.Fatalf("server received %q through a black hole", s)
		default:
		}
		p.SetBlackhole(false)
	})

	t.Run("cut reply", func(t *testing.T) {
		c, r := dial(t, p)
		p.CutReplies(1)
		if _, err := roundTrip(c, r, 5*time.Second); err == nil {
			t.Fatal("a cut reply arrived")
		}
		if s := <-lines; s != "ping\n" {
			t.Fatalf("server got %q, want the request", s)
		}
		c2, r2 := dial(t, p)
		if _, err := roundTrip(c2, r2, 5*time.Second); err != nil {
			t.Fatalf("next connection after the cut: %v", err)
		}
		<-lines
	})

	t.Run("drop connections", func(t *testing.T) {
		c, r := dial(t, p)
		if _, err := roundTrip(c, r, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		<-lines
		p.DropConnections()
		if _, err := roundTrip(c, r, 5*time.Second); err == nil {
			t.Fatal("a dropped connection answered")
		}
	})

	t.Run("down", func(t *testing.T) {
		p.SetDown(true)
		c, r := dial(t, p)
		if _, err := roundTrip(c, r, 5*time.Second); err == nil {
			t.Fatal("a down proxy answered")
		}
		p.SetDown(false)
		c, r = dial(t, p)
		if _, err := roundTrip(c, r, 5*time.Second); err != nil {
			t.Fatalf("after SetDown(false): %v", err)
		}
		<-lines
	})
}
