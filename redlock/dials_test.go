package redlock_test

import (
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/quorum"
	"github.com/redlock/redlock/redlock"
)

// silentAddr accepts connections and never answers.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().String()
}

// bothTransports runs f over the auto-pipeline and the direct transport.
func bothTransports(t *testing.T, f func(t *testing.T, direct bool)) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "auto-pipeline", true: "direct"}[direct], func(t *testing.T) { f(t, direct) })
	}
}

// A new user's first try, three nodes that refuse connections: each node's
// error says the connection was refused (go-redis is still retrying its
// dial when the vote closes), and errors.Is sees both the missing reply and
// the refusal. The negative control, nodes that accept and never answer,
// says only that no reply came.
func TestNodeErrorsCarryTheDialCause(t *testing.T) {
	bothTransports(t, func(t *testing.T, direct bool) {
		var refused, silent []redlock.Node
		for range 3 {
			refused = append(refused, newClient(t, redistest.RefusingAddr(t)))
			o := &redis.Options{Addr: silentAddr(t)}
			shortReadTimeout(o)
			cl := redis.NewClient(o)
			t.Cleanup(func() { cl.Close() })
			silent = append(silent, cl)
		}
		opts := &redlock.Options{NodeTimeout: 200 * time.Millisecond, NoAutoPipeline: direct}
		_, err := newLocker(t, refused, opts).TryLock(t.Context(), "k", time.Second)
		require.Error(t, err)
		var q *redlock.QuorumError
		require.ErrorAs(t, err, &q)
		failed := 0
		for _, n := range q.Nodes {
			if n.Outcome == redlock.Unanswered && n.Err == nil {
				continue // two failures decided the round before this node's deadline: not waited for
			}
			failed++
			assert.ErrorIs(t, n.Err, quorum.ErrNoReply, n.Name)
			assert.ErrorIs(t, n.Err, syscall.ECONNREFUSED, n.Name)
			assert.ErrorContains(t, n.Err, "connection refused", n.Name)
		}
		assert.GreaterOrEqual(t, failed, 2, "the nodes that decided the round")
		assert.ErrorIs(t, err, syscall.ECONNREFUSED, "through the *QuorumError too")

		_, err = newLocker(t, silent, opts).TryLock(t.Context(), "k", time.Second)
		require.ErrorAs(t, err, &q)
		for _, n := range q.Nodes {
			if n.Outcome == redlock.Unanswered && n.Err == nil {
				continue // not waited for, as above
			}
			assert.ErrorIs(t, n.Err, quorum.ErrNoReply, n.Name)
			if n.Err != nil {
				assert.NotContains(t, n.Err.Error(), "dial", "%s: connected, and silent: no dial to blame", n.Name)
			}
		}
	})
}

// A dial that failed long before the round is not its cause: the node came
// back, silent, and its error says only that no reply came.
func TestAnOldDialFailureIsNotTheCause(t *testing.T) {
	bothTransports(t, func(t *testing.T, direct bool) {
		addr := redistest.RefusingAddr(t)
		client := newClient(t, addr)
		l := newLocker(t, []redlock.Node{client}, &redlock.Options{NodeTimeout: 100 * time.Millisecond, NoAutoPipeline: direct})
		_, err := l.TryLock(t.Context(), "k", time.Second)
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		drain(t, l) // the calls still dialling give up

		ln, err := net.Listen("tcp", addr) // the node is back, and never answers
		if err != nil {
			t.Skipf("the port was taken meanwhile: %v", err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		}()
		time.Sleep(500 * time.Millisecond) // the refusal is older than twice NodeTimeout now
		_, err = l.TryLock(t.Context(), "k", time.Second)
		require.ErrorIs(t, err, quorum.ErrNoReply)
		assert.NotErrorIs(t, err, syscall.ECONNREFUSED)
	})
}

// A refused AUTH is the node's error, on both transports: go-redis returns
// a failure to set up the connection from a pipeline's Exec without setting
// it on the commands, which read as answered with nothing ("malformed
// reply") until the transport made it theirs.
func TestNodeErrorsCarryTheAuthFailure(t *testing.T) {
	bothTransports(t, func(t *testing.T, direct bool) {
		for _, c := range []struct{ password, want string }{{"wrong", "WRONGPASS"}, {"", "NOAUTH"}} {
			var nodes []redlock.Node
			for range 3 {
				m := redistest.Miniredis(t)
				m.RequireAuth("secret")
				nodes = append(nodes, redis.NewClient(&redis.Options{Addr: m.Addr(), Password: c.password}))
			}
			_, err := newLocker(t, nodes, &redlock.Options{NoAutoPipeline: direct}).TryLock(t.Context(), "k", time.Second)
			var q *redlock.QuorumError
			require.ErrorAs(t, err, &q)
			failed := 0
			for _, n := range q.Nodes {
				if n.Outcome == redlock.Unanswered {
					continue
				}
				failed++
				assert.ErrorContains(t, n.Err, c.want, "%s (password %q)", n.Name, c.password)
			}
			assert.GreaterOrEqual(t, failed, 2)
		}
	})
}

// A go-redis client given to New carries one dial record while it lives,
// and the record goes when the client is reclaimed, so that a program that
// makes a client and a Locker per request does not keep every client it
// ever made. The control is the record of a client still in use.
func TestDialRecordsGoWithTheirClients(t *testing.T) {
	m := redistest.Miniredis(t) // it hosts the scripts' digests under FIPS-only mode too
	trust(m)
	kept := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer kept.Close()
	_, err := redlock.New([]redlock.Node{kept}, nil)
	require.NoError(t, err)
	var dropped []weak.Pointer[byte]
	for range 20 {
		cl := redis.NewClient(&redis.Options{Addr: m.Addr()})
		for range 2 { // two Lockers on one client: one record
			// Patient: each Locker's guard examines the node first (a
			// script of its own), which a loaded machine may make slow.
			l, err := redlock.New([]redlock.Node{cl}, &redlock.Options{NodeTimeout: 10 * time.Second})
			require.NoError(t, err)
			lease, err := l.TryLock(t.Context(), "k", time.Minute)
			require.NoError(t, err)
			require.NoError(t, lease.Unlock(t.Context()))
			require.NoError(t, l.Drain(t.Context()))
		}
		require.True(t, redlock.DialRecorded(redlock.DialKey(cl)), "a client in use has its record")
		require.NoError(t, cl.Close())
		dropped = append(dropped, redlock.DialKey(cl))
	}
	recorded := func() (n int) {
		for _, p := range dropped {
			if redlock.DialRecorded(p) {
				n++
			}
		}
		return n
	}
	// Cleanups run on their own goroutine after a GC; bounded for a loaded machine.
	for deadline := time.Now().Add(30 * time.Second); recorded() > 0 && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	assert.Zero(t, recorded(), "records of clients reclaimed")
	assert.True(t, redlock.DialRecorded(redlock.DialKey(kept)), "the client in use keeps its record")
	runtime.KeepAlive(kept)
}

// hookCounting is a user's wrapper of a go-redis client, which takes hooks
// through the client it wraps, and counts them.
type hookCounting struct {
	*redis.Client
	added atomic.Int32
}

func (h *hookCounting) AddHook(hook redis.Hook) {
	h.added.Add(1)
	h.Client.AddHook(hook)
}

// A client shared by many Lockers carries one dial hook, not one per
// Locker, also when the Node is a wrapper of a go-redis client: a program
// that makes a Locker per request over one long-lived client must not grow
// the client's hook chain (and the cost of each dial) without bound.
func TestWrappedClientSharedByLockersCarriesOneDialHook(t *testing.T) {
	m := redistest.Miniredis(t)
	trust(m)
	cl := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer cl.Close()
	w := &hookCounting{Client: cl}
	for range 5 {
		_, err := redlock.New([]redlock.Node{w}, nil)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, w.added.Load(), "hooks added to the wrapped client by 5 Lockers")
}
