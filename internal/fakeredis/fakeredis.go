// Package fakeredis is a minimal RESP2 server that answers every command at
// once with a canned reply and keeps no data. Benchmarks use it to measure a
// client's own cost: with miniredis in the same process, the server's Lua
// interpreter dominates every figure (thousands of allocations per script
// call), and a real redis-server shares the CPU with the benchmark.
//
// The replies are those of an uncontended lock cycle on a node whose memory
// is trusted: SET (NX PX GET) finds no old value, scripts (EVALSHA, EVAL)
// return 1, HELLO is refused so that clients speak RESP2, and anything else
// is OK. The node guard's companions get what a steady Redis 7 node
// answers: PTTL of the marker counts down to an absolute expiry 150 years
// after the server started, so that the expiry minus the PTTL tells the
// time; GET finds the marker "0 ?" (trusted: see redlock.Locker.TrustNodes);
// SCRIPT EXISTS finds the script; SCRIPT LOAD names every script by one
// stand-in digest (fakeredis runs no Lua, and answers any EVALSHA); TIME
// tells the time; and a script on the marker key (the guard's
// examination) returns the marker, the time, the expiry and PTTL, the
// time, the marker as found, that the node does not evict, and the
// stand-in digest. Replies to a pipeline go out in one write, as Redis
// sends them.
package fakeredis

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Server is a running fake. Close stops it.
type Server struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup

	expiry int64 // the marker's absolute expiry, Unix ms
}

// Start listens on a free 127.0.0.1 port and serves until Close.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, conns: map[net.Conn]bool{}, expiry: time.Now().Add(years150).UnixMilli()}
	s.wg.Go(s.accept)
	return s, nil
}

// Addr is the host:port to dial.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for them.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			_ = serve(c, s.expiry)
		})
	}
}

// Serve answers the commands on c until it closes, as a Server answers
// each connection it accepts. Tests dial it in memory (one end of a
// net.Pipe given to a client's Dialer), which runs inside a synctest
// bubble where a listener's network would not.
func Serve(c net.Conn) error {
	return serve(c, time.Now().Add(years150).UnixMilli())
}

// serve answers the commands on c until it closes. It allocates nothing per
// command, so that it adds nothing to a benchmark's allocs/op.
func serve(c net.Conn, expiry int64) error {
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	var name, sub, key, scratch []byte
	for {
		var err error
		if name, sub, key, err = readCommand(r, name[:0], sub[:0], key[:0]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		switch out := reply(name); {
		case out == scriptReply && string(sub) == "load":
			w.WriteString(digestReply)
		case out == timeReply:
			scratch = appendTime(scratch[:0], "*2\r\n")
			w.Write(scratch)
		case out == pttlReply:
			scratch = appendPTTL(scratch[:0], expiry)
			w.Write(scratch)
		case out == evalReply && string(key) == markerKey:
			scratch = appendTime(append(scratch[:0], "*10\r\n$3\r\n0 ?\r\n"...), "")
			scratch = append(scratch, ':')
			scratch = strconv.AppendInt(scratch, expiry, 10)
			scratch = appendPTTL(append(scratch, "\r\n"...), expiry)
			scratch = appendTime(scratch, "")
			scratch = append(scratch, "$3\r\n0 ?\r\n:0\r\n"...) // found, and evicts: no
			scratch = append(scratch, digestReply...)
			w.Write(scratch)
		default:
			w.WriteString(out)
		}
		if r.Buffered() == 0 { // the end of what the client sent: answer it all
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// years150 is how far ahead the marker's expiry lies: never, in effect.
const years150 = 150 * 365 * 24 * time.Hour

// markerKey is the node guard's marker (redlock/internal/guard).
const markerKey = "redlock:memory"

// Replies that serve completes.
const (
	timeReply   = "time"
	pttlReply   = "pttl"
	evalReply   = ":1\r\n"
	scriptReply = "*1\r\n:1\r\n" // SCRIPT EXISTS; SCRIPT LOAD gets digestReply
)

// digestReply names every script (SCRIPT LOAD, the examination's own
// digest): a stand-in, since fakeredis runs no Lua and answers any
// EVALSHA. It is no script's SHA-1.
const digestReply = "$40\r\nfa4e0000000000000000000000000000000000fa\r\n"

// appendPTTL appends the marker's PTTL now, as an integer reply.
func appendPTTL(b []byte, expiry int64) []byte {
	b = append(b, ':')
	b = strconv.AppendInt(b, expiry-time.Now().UnixMilli(), 10)
	return append(b, "\r\n"...)
}

// appendTime appends head and the time as TIME's two bulk strings.
func appendTime(b []byte, head string) []byte {
	now := time.Now()
	b = append(b, head...)
	for _, v := range []int64{now.Unix(), int64(now.Nanosecond() / 1000)} {
		var digits [20]byte
		d := strconv.AppendInt(digits[:0], v, 10)
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(d)), 10)
		b = append(b, "\r\n"...)
		b = append(b, d...)
		b = append(b, "\r\n"...)
	}
	return b
}

func reply(name []byte) string {
	switch string(lower(name)) {
	case "hello":
		return "-ERR unknown command 'HELLO'\r\n"
	case "set":
		return "$-1\r\n"
	case "evalsha", "eval", "evalsha_ro", "eval_ro":
		return evalReply
	case "ping":
		return "+PONG\r\n"
	case "get":
		return "$3\r\n0 ?\r\n"
	case "script":
		return scriptReply
	case "time":
		return timeReply
	case "pttl":
		return pttlReply
	}
	return "+OK\r\n"
}

// readCommand reads one command (an array of bulk strings) and appends its
// name to name, its second argument (a subcommand: SCRIPT LOAD) to sub
// when it is short, and its fourth argument (a script's first key) to key
// when it is short.
func readCommand(r *bufio.Reader, name, sub, key []byte) ([]byte, []byte, []byte, error) {
	n, err := readHeader(r, '*')
	if err != nil {
		return nil, nil, nil, err
	}
	for i := range n {
		size, err := readHeader(r, '$')
		if err != nil {
			return nil, nil, nil, err
		}
		if i == 0 || i == 1 && size <= 6 || i == 3 && size <= len(markerKey) { // short: they fit the buffer
			b, err := r.Peek(size + 2)
			if err != nil {
				return nil, nil, nil, err
			}
			switch i {
			case 0:
				name = append(name, b[:size]...)
			case 1:
				sub = lower(append(sub, b[:size]...))
			default:
				key = append(key, b[:size]...)
			}
		}
		if _, err := r.Discard(size + 2); err != nil { // the argument and its CRLF
			return nil, nil, nil, err
		}
	}
	return name, sub, key, nil
}

// lower turns b's ASCII letters to lower case, in place.
func lower(b []byte) []byte {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return b
}

func readHeader(r *bufio.Reader, kind byte) (int, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 3 || line[0] != kind {
		return 0, fmt.Errorf("fakeredis: want %q, got %q", kind, line)
	}
	n := 0
	for _, d := range line[1 : len(line)-2] {
		if d < '0' || d > '9' {
			return 0, fmt.Errorf("fakeredis: bad length in %q", line)
		}
		n = n*10 + int(d-'0')
	}
	return n, nil
}
