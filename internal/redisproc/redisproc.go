// Package redisproc runs Redis and Valkey servers as plain processes on
// loopback ports, for the tools that start their own nodes (redlock-bench
// -spawn, redlock-chaos): start, stop, crash (SIGKILL), freeze (SIGSTOP),
// and restart on the same port and data directory, so that a client that
// reconnects finds the "same" node with whatever memory the restart kept.
//
// It is not for the library: nothing under redlock/ imports it. The
// integration tests' harness (test/integration/procs) starts its
// processes through it too (StartOn), and adds what a test suite needs:
// a testing.TB's cleanup, replicas, Sentinels, Redis Cluster.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/ports"
)

// Server is one server process, or the place for one between a crash and a
// restart. Its methods are safe for concurrent use.
type Server struct {
	bin    string
	port   int
	dir    string
	ownDir bool     // dir is the Server's own, removed by Close
	base   []string // the arguments before the caller's
	args   []string // the caller's, after the base arguments
	env    []string // added to this process's environment (StartEnv)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	frozen bool
}

// Start starts bin on a free 127.0.0.1 port with a data directory of its own
// (removed by Close), saving and AOF off unless args say otherwise (later
// arguments win), and waits until it answers PING.
func Start(ctx context.Context, bin string, args ...string) (*Server, error) {
	return StartEnv(ctx, nil, bin, args...)
}

// StartEnv is Start with variables added to the server's environment, on
// every restart too (LD_PRELOAD for a clock the test sets, for instance).
func StartEnv(ctx context.Context, env []string, bin string, args ...string) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redisproc-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, port: port, dir: dir, ownDir: true, args: args, env: env}
	s.base = append(s.bareArgs(), "--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning")
	if err := s.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// StartOn starts bin on port with dir as its data directory (kept by
// Close: the caller's), with only --port, --bind 127.0.0.1, --dir and
// --repl-diskless-sync-delay 0 before args (the server's own defaults hold
// for the rest: saving on, for one), or, when args[0] is a .conf file,
// with args alone (the file says all); and waits until it answers PING.
func StartOn(ctx context.Context, port int, dir, bin string, args ...string) (*Server, error) {
	s := &Server{bin: bin, port: port, dir: dir, args: args}
	if len(args) == 0 || !strings.HasSuffix(args[0], ".conf") {
		s.base = s.bareArgs()
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// bareArgs are the arguments every server gets unless a .conf file says
// all: its port, loopback, its directory, and a full sync that starts at
// once (not after the default 5 s wait for more replicas to join it).
func (s *Server) bareArgs() []string {
	return []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir, "--repl-diskless-sync-delay", "0"}
}

// Addr is the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir is the server's data directory (dump.rdb, the AOF, and server.log,
// its output).
func (s *Server) Dir() string { return s.dir }

// Client returns a new client of the server, for administration.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
}

func (s *Server) start(ctx context.Context) error {
	s.mu.Lock()
	args := s.args
	s.mu.Unlock()
	cmd := exec.Command(s.bin, append(slices.Clone(s.base), args...)...)
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not killed twice by the terminal's Ctrl-C
	logPath := filepath.Join(s.dir, "server.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	defer log.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisproc: %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.frozen = cmd, exited, false
	s.mu.Unlock()
	if err := waitReady(ctx, s.Addr(), exited); err != nil {
		s.Kill()
		out, _ := os.ReadFile(logPath)
		return fmt.Errorf("redisproc: %s on port %d: %w (its log: %s)", s.bin, s.port, err, strings.ReplaceAll(Tail(string(out), 5), "\n", " | "))
	}
	return nil
}

// Restart starts the server again on its port and data directory, after Kill
// or Stop, and waits until it answers: it loads dump.rdb or the AOF if its
// directory has one.
func (s *Server) Restart(ctx context.Context) error {
	if s.Alive() {
		return fmt.Errorf("redisproc: restart %s: still running", s.Addr())
	}
	return s.start(ctx)
}

// Promote makes a replica a primary (REPLICAOF NO ONE), and a primary for
// good: a later Restart no longer starts it as a replica.
func (s *Server) Promote(ctx context.Context) error {
	c := s.Client()
	defer c.Close()
	if err := c.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		return fmt.Errorf("redisproc: REPLICAOF NO ONE on %s: %w", s.Addr(), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var args []string
	for i := 0; i < len(s.args); i++ {
		if s.args[i] == "--replicaof" || s.args[i] == "--slaveof" {
			i += 2 // and its host and port
			continue
		}
		args = append(args, s.args[i])
	}
	s.args = args
	return nil
}

// Alive reports whether the process is running (frozen or not).
func (s *Server) Alive() bool {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Kill crashes the server (SIGKILL, which also ends a frozen one) and waits
// for it to exit: nothing is saved.
func (s *Server) Kill() {
	s.signal(syscall.SIGKILL)
	s.wait(0)
}

// Stop shuts the server down (SIGTERM; SIGKILL after 5 s) and waits for it.
func (s *Server) Stop() {
	s.Thaw()
	s.signal(syscall.SIGTERM)
	if !s.wait(5 * time.Second) {
		s.Kill()
	}
}

// Freeze stops the process (SIGSTOP): its connections stay open and nothing
// is answered, as a stalled VM. Thaw resumes it. The error is the
// signal's.
func (s *Server) Freeze() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.frozen {
		return nil
	}
	s.frozen = true
	return s.cmd.Process.Signal(syscall.SIGSTOP)
}

// Thaw resumes a frozen process. The error is the signal's.
func (s *Server) Thaw() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || !s.frozen {
		return nil
	}
	s.frozen = false
	return s.cmd.Process.Signal(syscall.SIGCONT)
}

// Close stops the server and removes its data directory if it is the
// Server's own (Start's; StartOn's is the caller's).
func (s *Server) Close() {
	s.Stop()
	if s.ownDir {
		os.RemoveAll(s.dir)
	}
}

// Log is the last lines of the server's output (server.log), one per
// line.
func (s *Server) Log(lines int) string {
	out, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	return Tail(string(out), lines)
}

// RemoveData deletes the server's persisted data (dump.rdb and the AOF
// directory), so that the next Restart begins empty. Call it while the
// server is down.
func (s *Server) RemoveData() error {
	for _, name := range []string{"dump.rdb", "appendonlydir", "appendonly.aof"} {
		if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(sig)
	}
}

// wait waits up to limit (0: without limit) for the process to exit.
func (s *Server) wait(limit time.Duration) bool {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited == nil {
		return true
	}
	if limit == 0 {
		<-exited
		return true
	}
	select {
	case <-exited:
		return true
	case <-time.After(limit):
		return false
	}
}

func waitReady(ctx context.Context, addr string, exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	// A server loading its data answers LOADING to PING.
	return poll(ctx, 20*time.Second, 10*time.Millisecond, exited, func() bool { return c.Ping(ctx).Err() == nil })
}

// WaitInSync waits until the replica at addr reports its link to its
// primary up.
func WaitInSync(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	return poll(ctx, 20*time.Second, 20*time.Millisecond, nil, func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
}

// poll calls cond every interval until it holds; it gives up when limit has
// passed, exited closes (a nil channel never does), or ctx ends.
func poll(ctx context.Context, limit, interval time.Duration, exited <-chan struct{}, cond func() bool) error {
	deadline := time.After(limit)
	for !cond() {
		select {
		case <-exited:
			return errors.New("exited at start")
		case <-deadline:
			return fmt.Errorf("not ready after %v", limit)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
	return nil
}

// Version is what the server at addr says it runs: "redis 8.0.2",
// "valkey 8.1.1".
func Version(ctx context.Context, addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "version unknown: " + err.Error()
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	if v := fields["valkey_version"]; v != "" {
		return "valkey " + v
	}
	return "redis " + fields["redis_version"]
}

// FreePort returns a loopback port that was free a moment ago: from
// 15000-19999, below Linux's ephemeral range (32768-60999 by default),
// where an outgoing connection of any process could take it between this
// check and the server's bind, or while the server is down for a restart;
// and away from the integration harness's ranges (10000-14999 for its
// processes, 20000-32767 for its containers). Where test runs go side by
// side, each has its share of it (internal/ports). Never the same port
// twice in a process, so that a crashed server's port stays its own.
func FreePort() (int, error) {
	return ports.Free(15000, 20000)
}

// Tail is the last lines of a program's output, one per line.
func Tail(s string, lines int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}
