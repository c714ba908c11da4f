package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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
		{"-READONLY You can't write against a read only replica.\r\n", nil, redis.IsReadOnlyError},
		{"-NOPERM User app has no permissions to run the 'set' command\r\n", nil, deniedByACL},
		{"-LOADING Redis is loading the dataset in memory\r\n", nil, redis.IsLoadingError},
		{"!21\r\nSYNTAX invalid syntax\r\n", nil, func(err error) bool { return redis.HasErrorPrefix(err, "SYNTAX invalid syntax") }},
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

// malformed: an error of redlock's own, not the server's.
func malformed(err error) bool {
	var re redis.Error
	return err != nil && !errors.As(err, &re)
}

// The reply setRaw sets is the one go-redis would have set, value and error
// alike (the error of the same type, with the same text), over RESP2 and
// RESP3: a grant (nil), contention (the holder's value), and an error reply
// (WRONGTYPE: the key holds a list).
func TestSetRawMatchesGoRedis(t *testing.T) {
	ctx := t.Context()
	m := miniredis.RunT(t)
	cases := []struct {
		name    string
		prepare func()
	}{
		{"granted", func() { m.Del("k") }},
		{"held by another value", func() { require.NoError(t, m.Set("k", "holder")) }},
		{"WRONGTYPE", func() { m.Del("k"); m.Lpush("k", "x") }},
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
