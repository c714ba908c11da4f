package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
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
	m := redistest.Miniredis(t)
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
	c := redis.NewClient(&redis.Options{Addr: redistest.RefusingAddr(t), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	raw := redis.NewRawCmd(context.Background(), "SET", "k", "v", "NX", "PX", 1000, "GET")
	_ = c.Process(context.Background(), raw)
	read := redis.NewCmd(context.Background())
	setRaw(read, raw)
	var opErr *net.OpError
	assert.ErrorAs(t, read.Err(), &opErr)
}
