package redisproc_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redisproc"
)

func start(t *testing.T) *redisproc.Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not on PATH; scripts/test.sh installs it")
	}
	s, err := redisproc.Start(t.Context(), bin)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// A crash keeps nothing; a restart after SAVE loads the snapshot; one after
// RemoveData begins empty; the port stays the same throughout.
func TestCrashAndRestart(t *testing.T) {
	s := start(t)
	ctx := t.Context()
	c := s.Client()
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.Set(ctx, "saved", "1", 0).Err())
	require.NoError(t, c.Save(ctx).Err())
	require.NoError(t, c.Set(ctx, "unsaved", "1", 0).Err())

	s.Kill()
	assert.False(t, s.Alive())
	require.NoError(t, s.Restart(ctx))
	assert.True(t, s.Alive())
	n, err := c.Exists(ctx, "saved", "unsaved").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the snapshot's key only")

	s.Kill()
	require.NoError(t, s.RemoveData())
	require.NoError(t, s.Restart(ctx))
	n, err = c.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Error(t, s.Restart(ctx), "a running server is not restarted")
}

// A frozen server keeps its connections and answers nothing; thawed, it
// answers again.
func TestFreeze(t *testing.T) {
	s := start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.Ping(t.Context()).Err())
	s.Freeze()
	err := c.Ping(t.Context()).Err()
	require.Error(t, err)
	s.Thaw()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, redisproc.Version(ctx, s.Addr()), "redis ")
}

// A promoted replica stays a primary across a crash and restart: the
// restart does not start it as a replica of its old primary again.
func TestPromoteOutlivesARestart(t *testing.T) {
	primary := start(t)
	ctx := t.Context()
	_, port, _ := strings.Cut(primary.Addr(), ":")
	replica, err := redisproc.Start(ctx, "redis-server", "--replicaof", "127.0.0.1", port, "--replica-announce-ip", "127.0.0.1")
	require.NoError(t, err)
	t.Cleanup(replica.Close)
	require.NoError(t, redisproc.WaitInSync(ctx, replica.Addr()))
	role := func() string {
		c := replica.Client()
		defer c.Close()
		r, err := c.Do(ctx, "ROLE").Slice()
		require.NoError(t, err)
		return r[0].(string)
	}
	require.Equal(t, "slave", role())
	require.NoError(t, replica.Promote(ctx))
	assert.Equal(t, "master", role())
	replica.Kill()
	require.NoError(t, replica.Restart(ctx))
	assert.Equal(t, "master", role(), "restarted as a replica of its old primary")
}

// Ports come from 15000-19999 (below the ephemeral range, away from the
// integration harness's), a run's share of it where REDLOCK_TEST_PORT_SLOT
// names one, never the same twice in a process, and never one that is
// taken.
func TestFreePortsStayInTheRunsShare(t *testing.T) {
	for _, c := range []struct {
		slot   string
		lo, hi int
	}{{"", 15000, 20000}, {"2/4", 16250, 17500}} {
		t.Run("slot "+c.slot, func(t *testing.T) {
			t.Setenv("REDLOCK_TEST_PORT_SLOT", c.slot)
			seen := map[int]bool{}
			for range 20 {
				port, err := redisproc.FreePort()
				require.NoError(t, err)
				assert.GreaterOrEqual(t, port, c.lo)
				assert.Less(t, port, c.hi)
				assert.False(t, seen[port], "port %d handed out twice", port)
				seen[port] = true
				// Taken now: the next call must pass it by.
				ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1))
				if err == nil {
					t.Cleanup(func() { ln.Close() })
					next, err := redisproc.FreePort()
					require.NoError(t, err)
					assert.NotEqual(t, port+1, next, "a port in use was handed out")
					seen[next] = true
				}
			}
		})
	}
	t.Setenv("REDLOCK_TEST_PORT_SLOT", "5/4")
	_, err := redisproc.FreePort()
	assert.ErrorContains(t, err, "REDLOCK_TEST_PORT_SLOT", "a bad slot is refused by name")
}
