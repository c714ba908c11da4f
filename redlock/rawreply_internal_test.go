package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every scalar reply reads as go-redis would read it; what is not a scalar
// reply, or not well formed, is an error that says so.
func TestParseScalar(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want any
		err  func(error) bool // nil: no error
	}{
		{"_\r\n", nil, func(err error) bool { return errors.Is(err, redis.Nil) }},
		{"$-1\r\n", nil, func(err error) bool { return errors.Is(err, redis.Nil) }},
		{"$5\r\nhello\r\n", "hello", nil},
		{"$0\r\n\r\n", "", nil},
		{"$4\r\na\r\nb\r\n", "a\r\nb", nil},
		{"+OK\r\n", "OK", nil},
		{":42\r\n", int64(42), nil},
		{"-READONLY You can't write against a read only replica.\r\n", nil, readAgainAs("READONLY You can't write against a read only replica.")},
		{"-NOPERM User app has no permissions to run the 'set' command\r\n", nil, readAgainAs("NOPERM User app has no permissions to run the 'set' command")},
		{"!21\r\nSYNTAX invalid syntax\r\n", nil, readAgainAs("SYNTAX invalid syntax")},
		{"$5\r\nhi\r\n", nil, malformed},
		{"$x\r\n", nil, malformed},
		{":4x\r\n", nil, malformed},
		{"hello", nil, malformed},
		{"", nil, malformed},
		{"*1\r\n:1\r\n", nil, malformed},
		{"%1\r\n+a\r\n+b\r\n", nil, malformed},
	} {
		t.Run(fmt.Sprintf("%q", tc.raw), func(t *testing.T) {
			got, err := parseScalar([]byte(tc.raw))
			if tc.err == nil {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				return
			}
			assert.Nil(t, got)
			assert.True(t, tc.err(err), "%v", err)
		})
	}
}

// readAgainAs: an error reply, to be read again by go-redis (rawreply.go).
func readAgainAs(msg string) func(error) bool {
	return func(err error) bool { return readAgain(err) && err.Error() == msg }
}

// malformed: an error of redlock's own, not the server's.
func malformed(err error) bool {
	var re redis.Error
	return err != nil && !errors.As(err, &re)
}

// The reply setRaw sets is the one go-redis would have set, value and error
// alike, over RESP2 and RESP3: a grant (nil) and contention (the holder's
// value). Error replies are read again by go-redis (TestErrorRepliesAreReadByGoRedis).
func TestSetRawMatchesGoRedis(t *testing.T) {
	ctx := t.Context()
	m := miniredis.RunT(t)
	cases := []struct {
		name    string
		prepare func()
	}{
		{"granted", func() { m.Del("k") }},
		{"held by another value", func() { require.NoError(t, m.Set("k", "holder")) }},
	}
	args := []any{"SET", "k", "v", "NX", "PX", 60000, "GET"}
	for _, protocol := range []int{2, 3} {
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), Protocol: protocol})
		t.Cleanup(func() { c.Close() })
		for _, tc := range cases {
			t.Run(fmt.Sprintf("RESP%d/%s", protocol, tc.name), func(t *testing.T) {
				tc.prepare()
				plain := c.Do(ctx, args...)
				tc.prepare()
				raw := redis.NewRawCmd(ctx, args...)
				require.NoError(t, c.Process(ctx, raw), "a RawCmd takes no reply for an error")
				read := redis.NewCmd(ctx, args...)
				setRaw(read, raw)
				assert.Equal(t, plain.Val(), read.Val())
				assert.Equal(t, plain.Err(), read.Err())
				if plain.Err() != nil {
					assert.IsType(t, plain.Err(), read.Err())
				}
			})
		}
	}
}

// A network error on the RawCmd is the command's error.
func TestSetRawKeepsNetworkErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	raw := redis.NewRawCmd(context.Background(), "SET", "k", "v", "NX", "PX", 1000, "GET")
	_ = c.Process(context.Background(), raw)
	read := redis.NewCmd(context.Background())
	setRaw(read, raw)
	var opErr *net.OpError
	assert.ErrorAs(t, read.Err(), &opErr)
}

// setTypes is a go-redis hook that records the Go type of every SET a
// client sends, alone or in a pipeline.
type setTypes struct {
	mu    sync.Mutex
	types []string
}

func (h *setTypes) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if strings.EqualFold(c.Name(), "set") {
			h.types = append(h.types, fmt.Sprintf("%T", c))
		}
	}
}

func (h *setTypes) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.types...)
}

func (h *setTypes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *setTypes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}

func (h *setTypes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds...)
		return next(ctx, cmds)
	}
}

// The auto-pipeline sends an acquisition's SET as a RawCmd, alone (guard
// off) and with the guard's companion; the votes come out as before: a
// grant, contention, and a server's error reply named in the QuorumError.
func TestAcquisitionsAreReadRaw(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		t.Run(fmt.Sprintf("guarded=%v", guarded), func(t *testing.T) {
			ctx := t.Context()
			servers, nodes := miniNodes(t, 3)
			hooks := make([]*setTypes, len(nodes))
			for i, n := range nodes {
				hooks[i] = new(setTypes)
				n.(*redis.Client).AddHook(hooks[i])
			}
			l, err := New(nodes, &Options{NodeTimeout: 5 * time.Second, NoQuarantine: !guarded})
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Drain(context.Background()) })

			lease, err := l.TryLock(ctx, "k", time.Minute)
			require.NoError(t, err)
			for i, h := range hooks {
				assert.Equal(t, []string{"*redis.RawCmd"}, h.seen(), "node %d", i)
			}
			_, err = l.TryLock(ctx, "k", time.Minute)
			assert.ErrorIs(t, err, ErrNotObtained, "held: contention")
			require.NoError(t, lease.Unlock(ctx))
			require.NoError(t, l.Drain(ctx))

			for _, m := range servers[:2] {
				m.Lpush("k", "x") // WRONGTYPE for SET ... GET
			}
			_, err = l.TryLock(ctx, "k", time.Minute)
			var qe *QuorumError
			require.ErrorAs(t, err, &qe)
			for i := range 2 {
				assert.True(t, redis.HasErrorPrefix(qe.Nodes[i].Err, "WRONGTYPE"), "node %d: %v", i, qe.Nodes[i].Err)
			}
			assert.NoError(t, qe.Nodes[2].Err)
		})
	}
}

// An error reply to an acquisition read raw is read again by go-redis (the
// SET sent again as a plain command), so that it does what it does for its
// own commands: READONLY gets its type of error, and the connection that
// answered it is retired (a demoted primary behind a DNS name or a proxy
// that moved on is left), where reading it raw kept every connection. A
// WRONGTYPE reply gets go-redis's reply type, as a plain Do gets.
func TestErrorRepliesAreReadByGoRedis(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		t.Run(fmt.Sprintf("guarded=%v", guarded), func(t *testing.T) {
			ctx := t.Context()
			m := miniredis.RunT(t)
			_ = m.Set(markerKey, "0 ?")
			var readOnly atomic.Bool
			m.Server().SetPreHook(func(p *server.Peer, cmd string, args ...string) bool {
				if readOnly.Load() && strings.EqualFold(cmd, "set") && len(args) > 0 && args[0] == "k" {
					p.WriteError("READONLY You can't write against a read only replica.")
					return true
				}
				return false
			})
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: 1, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond})
			t.Cleanup(func() { c.Close() })
			l, err := New([]Node{c}, &Options{NodeTimeout: 5 * time.Second, NoQuarantine: !guarded})
			require.NoError(t, err)
			require.NotNil(t, l.nodes[0].pipe, "the auto-pipeline")

			lease, err := l.TryLock(ctx, "k", time.Minute) // the connections dialed
			require.NoError(t, err)
			require.NoError(t, lease.Unlock(ctx))
			require.NoError(t, l.Drain(ctx))

			readOnly.Store(true)
			dials := m.TotalConnectionCount()
			_, err = l.TryLock(ctx, "k", time.Minute)
			var qe *QuorumError
			require.ErrorAs(t, err, &qe)
			assert.True(t, redis.IsReadOnlyError(qe.Nodes[0].Err), "%v", qe.Nodes[0].Err)
			plain := c.Do(ctx, "SET", "k", "v", "NX", "PX", 1000, "GET").Err()
			require.True(t, redis.IsReadOnlyError(plain))
			assert.True(t, inChain(qe.Nodes[0].Err, plain), "the error go-redis gives its own command (%T), not %T", plain, qe.Nodes[0].Err)
			assert.Greater(t, m.TotalConnectionCount(), dials, "the connection that answered READONLY was retired")

			readOnly.Store(false)
			require.NoError(t, l.Drain(ctx))
			m.Del("k")
			_, _ = m.Lpush("k", "x")
			_, err = l.TryLock(ctx, "k", time.Minute)
			require.ErrorAs(t, err, &qe)
			plain = c.Do(ctx, "SET", "k", "v", "NX", "PX", 1000, "GET").Err()
			require.True(t, redis.HasErrorPrefix(plain, "WRONGTYPE"))
			assert.True(t, redis.HasErrorPrefix(qe.Nodes[0].Err, "WRONGTYPE"), "%v", qe.Nodes[0].Err)
			m.Del("k")
			lease, err = l.TryLock(ctx, "k", time.Minute)
			require.NoError(t, err, "a writable node grants at once")
			require.NoError(t, lease.Unlock(ctx))
		})
	}
}

// inChain reports whether err's chain holds an error of want's type.
func inChain(err, want error) bool {
	if err == nil {
		return false
	}
	if fmt.Sprintf("%T", err) == fmt.Sprintf("%T", want) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return inChain(u.Unwrap(), want)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if inChain(e, want) {
				return true
			}
		}
	}
	return false
}
