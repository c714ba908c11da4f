package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redisproc"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock"
)

// admin runs the command and returns its exit status, stdout and stderr.
func admin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// deployment is n in-process nodes, trusted, and an application's Locker on
// them.
func deployment(t *testing.T, n int, owner string) (nodes string, servers []*miniredis.Miniredis, app *redlock.Locker) {
	t.Helper()
	var addrs []string
	var clients []redlock.Node
	for range n {
		m := miniredis.RunT(t)
		_ = m.Set("redlock:memory", "0 ?") // trusted: miniredis has no INFO server for the guard
		servers = append(servers, m)
		addrs = append(addrs, m.Addr())
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	app, err := redlock.New(clients, &redlock.Options{NodeTimeout: 5 * time.Second, Owner: owner})
	require.NoError(t, err)
	t.Cleanup(func() { _ = app.Drain(context.Background()) })
	return strings.Join(addrs, ","), servers, app
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage: redlock-admin"},
		{[]string{"-nodes", "127.0.0.1:1", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"-nodes", "127.0.0.1:1", "inspect"}, "inspect takes one KEY, got 0 arguments"},
		{[]string{"-nodes", "127.0.0.1:1", "revoke", "a", "b"}, "revoke takes one KEY, got 2 arguments"},
		{[]string{"-nodes", "127.0.0.1:1", "health", "x"}, "health takes no arguments"},
		{[]string{"inspect", "k"}, "-nodes: give every node"},
		{[]string{"-nodes", "127.0.0.1:1", "-timeout", "0s", "health"}, "-timeout 0s: must be positive"},
		{[]string{"-nodes", "nonsense", "health"}, `-nodes "nonsense": want host:port`},
		{[]string{"-nodes", "127.0.0.1:1", "-tls-cert", "c.pem", "health"}, "-tls-cert and -tls-key: give both"},
		{[]string{"-nodes", "127.0.0.1:1", "-tls-ca", "ca.pem", "health"}, "no rediss:// node"},
		{[]string{"-nodes", "127.0.0.1:1", "-owner", "a|b", "health"}, "Options.Owner"},
		{[]string{"-bogus"}, "flag provided but not defined"},
	} {
		code, out, errOut := admin(t, c.args...)
		assert.Equal(t, 2, code, "%q", c.args)
		assert.Empty(t, out, "%q", c.args)
		assert.Contains(t, errOut, c.want, "%q", c.args)
	}
}

// inspect shows the holder's fencing token as its Lease.Token reports it,
// the node's label and all, beside each node's counter: here the lowest
// counter is on the node whose address sorts first (label 0), so any
// majority's token carries another node's label and differs from every
// counter; the counters all differ, so phase 2 runs and records the token
// on every node.
func TestInspectShowsTheTokenTheHolderSees(t *testing.T) {
	ctx := t.Context()
	nodes, servers, _ := deployment(t, 3, "")
	addrs := strings.Split(nodes, ",")
	var clients []redlock.Node
	first := 0
	for i, a := range addrs {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: a}))
		if a < addrs[first] {
			first = i
		}
	}
	// A generous NodeTimeout, as above: the first TryLock also runs the
	// node guard's examination (a script miniredis runs slowly), and this
	// test is about what the admin prints, not about time.
	app, err := redlock.New(clients, &redlock.Options{Fencing: true, NodeTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = app.Drain(context.Background()) })
	counter := 57
	for i, m := range servers {
		c := 10
		if i != first {
			counter++
			c = counter
		}
		require.NoError(t, m.Set("{orders:42}:fencing", strconv.Itoa(c)))
	}
	lease, err := app.TryLock(ctx, "orders:42", 30*time.Second)
	require.NoError(t, err)
	require.NoError(t, app.Drain(ctx))
	token, label := lease.Token(), lease.Token()&0xff
	require.Contains(t, []uint64{59, 60}, token>>8, "token %d", token)
	require.NotZero(t, label, "token %d: the counter came from a node labelled 1 or 2", token)

	code, out, errOut := admin(t, "-nodes", nodes, "inspect", "orders:42")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, fmt.Sprintf(`(?m)^(node \d \(\S+\) +yes +- +%s +30s +%d +\d+ .*\n){3}`, lease.Value(), token), out)
	assert.Contains(t, out, fmt.Sprintf("orders:42: the holder's fencing token is %d, as its Lease.Token() says (counter %d, node label %d: token = counter<<8 | label)", token, token>>8, label))

	code, out, _ = admin(t, "-nodes", nodes, "-json", "inspect", "orders:42")
	require.Equal(t, 0, code)
	var in inspection
	require.NoError(t, json.Unmarshal([]byte(out), &in), out)
	assert.Equal(t, token, in.Token)
	for i, n := range in.Nodes {
		assert.Equal(t, token, n.Token, "node %d", i)
	}
}

func TestInspectAndRevoke(t *testing.T) {
	ctx := t.Context()
	nodes, servers, app := deployment(t, 3, "web-3:812")
	lease, err := app.TryLock(ctx, "orders:42", 30*time.Second)
	require.NoError(t, err)
	require.NoError(t, app.Drain(ctx))

	code, out, errOut := admin(t, "-nodes", nodes, "inspect", "orders:42")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^NODE +HELD +OWNER +VALUE +TTL +TOKEN +COUNTER +REVOKED +QUARANTINE +ERROR$`, out)
	assert.Equal(t, 3, strings.Count(out, "yes   web-3:812  "+lease.Value()), out)
	assert.Contains(t, out, `orders:42: held by "web-3:812" (value `+lease.Value()+`) on a majority for `)

	// A script reads the same as JSON.
	code, out, _ = admin(t, "-nodes", nodes, "-json", "inspect", "orders:42")
	require.Equal(t, 0, code)
	var in inspection
	require.NoError(t, json.Unmarshal([]byte(out), &in), out)
	assert.Equal(t, lease.Value(), in.Holder)
	assert.Equal(t, "web-3:812", in.Owner)
	assert.Greater(t, in.HeldForMs, 29000.0) // miniredis's keys expire only when told to
	require.Len(t, in.Nodes, 3)
	assert.True(t, in.Nodes[2].Held)

	// Without -yes, revoke shows what it would delete and deletes nothing.
	code, out, _ = admin(t, "-nodes", nodes, "revoke", "orders:42")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "nothing revoked: run again with -yes")
	for i, m := range servers {
		v, _ := m.Get("orders:42")
		assert.Equal(t, lease.Value(), v, "node %d", i)
	}

	code, out, errOut = admin(t, "-nodes", nodes, "-owner", "oncall-alice", "revoke", "-yes", "orders:42")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, 3, strings.Count(out, "yes      web-3:812  "+lease.Value()), out)
	assert.Contains(t, out, "orders:42: revoked by oncall-alice")
	for i, m := range servers {
		assert.False(t, m.Exists("orders:42"), "node %d", i)
	}
	err = lease.Extend(ctx, 30*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "the holder's next extension fails")
	assert.Contains(t, err.Error(), "revoked by an operator")

	code, out, _ = admin(t, "-nodes", nodes, "-json", "revoke", "-yes", "orders:42")
	require.Equal(t, 0, code)
	var rev revocation
	require.NoError(t, json.Unmarshal([]byte(out), &rev), out)
	assert.False(t, rev.DryRun)
	for _, n := range rev.Nodes {
		assert.False(t, n.Deleted, "nothing left to delete")
	}

	code, out, _ = admin(t, "-nodes", nodes, "inspect", "orders:42")
	require.Equal(t, 0, code)
	assert.Equal(t, 3, strings.Count(out, lease.Value()), "each node's tombstone shows the revoked value:\n%s", out)
	assert.Contains(t, out, "orders:42: no majority holds it")
}

// A node that cannot be reached is named, and the exit status says a node
// failed; the others are read.
func TestInspectWithANodeDown(t *testing.T) {
	nodes, _, _ := deployment(t, 2, "")
	down := redistest.RefusingAddr(t)
	code, out, errOut := admin(t, "-nodes", nodes+","+down, "-timeout", "300ms", "inspect", "k")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "1 of 3 nodes could not be read")
	assert.Regexp(t, `node 2 \(`+down+`\) +\? `, out)
	assert.Contains(t, out, "k: no majority holds it")
}

// health and trust on real servers, which say their version, role and
// memory's start (miniredis has no INFO server).
func TestHealthAndTrust(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not on PATH; scripts/test.sh installs it")
	}
	var addrs []string
	for range 3 {
		s, err := redisproc.Start(t.Context(), bin)
		require.NoError(t, err)
		t.Cleanup(s.Close)
		addrs = append(addrs, s.Addr())
	}
	nodes := strings.Join(addrs, ",")

	code, out, errOut := admin(t, "-nodes", nodes, "health")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^NODE +ROLE +VERSION +REPLICAS +RTT +QUARANTINE +DURABLE +EVICTS +ERROR$`, out)
	assert.Regexp(t, `node 0 \(`+addrs[0]+`\) +master +\d+\.\d+\.\d+ +0 +\S+ +1m\ds +no +no +-`, out, "new servers: quarantined for MaxTTL")
	assert.Contains(t, out, "is quarantined: its memory began less than MaxTTL ago")

	code, out, _ = admin(t, "-nodes", nodes, "trust")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "nothing changed: run again with -yes")
	code, out, _ = admin(t, "-nodes", nodes, "-json", "health")
	require.Equal(t, 0, code)
	var rows []nodeHealth
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	require.Len(t, rows, 3)
	for _, r := range rows {
		assert.Greater(t, r.QuarantineLeftMs, 50000.0, "still quarantined: %+v", r)
		assert.Equal(t, "master", r.Role)
	}

	code, out, errOut = admin(t, "-nodes", nodes, "trust", "-yes")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "every node is trusted")
	code, out, _ = admin(t, "-nodes", nodes, "-json", "health")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	for _, r := range rows {
		assert.Zero(t, r.QuarantineLeftMs, "trusted: %+v", r)
		assert.Empty(t, r.Error)
	}
}

// An operator's mistyped key that names something the library writes (the
// guard's marker above all: revoking it would quarantine every node of
// every Locker) is refused before anything reaches a node.
func TestReservedNamesAreRefused(t *testing.T) {
	nodes, servers, _ := deployment(t, 3, "")
	for _, cmd := range []string{"revoke", "inspect"} {
		for _, key := range []string{"redlock:memory", "{k}:fencing", "{k}:redlock-waiters"} {
			code, _, errOut := admin(t, "-nodes", nodes, cmd, key)
			assert.NotZero(t, code, "%s %s", cmd, key)
			assert.Contains(t, errOut, "the name is reserved", "%s %s", cmd, key)
		}
	}
	for i, m := range servers {
		v, err := m.Get("redlock:memory")
		assert.NoError(t, err, "node %d lost its marker", i)
		assert.True(t, strings.HasPrefix(v, "0 "), "node %d: its memory began anew: %q", i, v)
	}
}
