package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
)

// Nodes that serve TLS only, with client certificates required (Redis's
// default): the plain port is off, and acquire, extend, check, release,
// fencing and a node's crash and restart all work over TLS.
func TestTLSNodes(t *testing.T) {
	ctx := t.Context()
	c := harness.Start(t, harness.Options{Nodes: 3, TLS: true, Persistent: true})

	plain := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr, MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
	defer plain.Close()
	require.Error(t, plain.Ping(ctx).Err(), "a plain-text client reached a TLS-only node")
	noCert := c.Nodes[0].ClientOptions("", "")
	noCert.TLSConfig.Certificates, noCert.MaxRetries = nil, -1
	nc := redis.NewClient(noCert)
	defer nc.Close()
	require.Error(t, nc.Ping(ctx).Err(), "a client without a certificate reached a node that requires one")

	l := newLocker(t, c, &redlock.Options{Fencing: true, NodeTimeout: time.Second})
	require.NoError(t, l.Warm(ctx))
	lease, err := l.TryLock(ctx, "tls", 30*time.Second)
	require.NoError(t, err)
	require.NoError(t, lease.Extend(ctx, 30*time.Second))
	require.NoError(t, lease.Check(ctx))
	first := lease.Token()

	// A node crashes and restarts (with AOF): its clients reconnect over
	// TLS and the lease goes on.
	require.NoError(t, c.Nodes[0].Restart(ctx))
	require.NoError(t, lease.Check(ctx))
	require.NoError(t, lease.Extend(ctx, 30*time.Second))
	holders, err := c.Holders(ctx, "tls", lease.Value())
	require.NoError(t, err)
	require.Len(t, holders, 3, "every node holds the lease after node 0's restart")
	require.NoError(t, lease.Unlock(ctx))

	next, err := l.TryLock(ctx, "tls", 30*time.Second)
	require.NoError(t, err)
	require.Greater(t, next.Token(), first, "fencing tokens grow across a node's restart")
	require.NoError(t, next.Unlock(ctx))
	drain(t, l)
	eventually(t, 5*time.Second, "no lock keys left", noKeys(ctx, c, "tls"))
}

// A new Locker's first acquisition on TLS nodes 20ms away (each way): without
// Warm it needs the TLS handshake, go-redis's HELLO and CLIENT SETINFO, and
// the SET, at least four round trips (160ms, a floor, since the proxy delays
// every chunk by at least 20ms), over the 150ms NodeTimeout, so it fails
// although every node is healthy; after Warm it needs one round trip (40ms)
// and succeeds.
func TestFirstLockOnTLSNodesBehindLatency(t *testing.T) {
	c := harness.Start(t, harness.Options{Nodes: 3, TLS: true})
	newLocker(t, c, nil) // trusts the new nodes, on clients of its own
	for _, n := range c.Nodes {
		n.SetLatency(20*time.Millisecond, 20*time.Millisecond)
	}
	for _, warm := range []bool{false, true} {
		t.Run(map[bool]string{false: "cold", true: "warm"}[warm], func(t *testing.T) {
			ctx := t.Context()
			// Not newLockerOn: its TrustNodes would dial the clients.
			l := untrustingLocker(t, c.ClientsAs(t, "", ""), &redlock.Options{NodeTimeout: 150 * time.Millisecond})
			if warm {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				require.NoError(t, l.Warm(wctx))
			}
			lease, err := l.TryLock(ctx, "first-"+t.Name(), 10*time.Second)
			if !warm {
				require.Error(t, err, "the cold first TryLock succeeded: the control shows nothing")
				require.NotErrorIs(t, err, redlock.ErrNotObtained, "healthy nodes reported as contention")
				return
			}
			require.NoError(t, err, "the first TryLock after Warm")
			require.NoError(t, lease.Unlock(ctx))
		})
	}
}

// aclRules is docs/operations.md's least-privilege ACL user for locks whose names
// begin with "lock:", word for word (TestOperationsGuideShowsTheACLRecipe checks):
// the lock keys and their fencing counters ({lock:...}:fencing), the
// commands the library sends and those its scripts call, and PING and
// SCRIPT LOAD for Warm. aclDurability adds what Durability and
// RequireDurable read.
const (
	aclRules      = "on >app-secret resetkeys ~lock:* ~{lock:* ~redlock:memory* resetchannels &{lock:* -@all +set +get +del +pexpire +incr +time +pttl +pexpiretime +info +evalsha +eval +script|load +script|exists +ping +spublish +ssubscribe +sunsubscribe +lpos +rpush +lrem +lpop +scan"
	aclDurability = "+config|get"
)

func TestOperationsGuideShowsTheACLRecipe(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	require.NoError(t, err)
	for _, want := range []string{"ACL SETUSER app reset " + aclRules, aclDurability} {
		require.Contains(t, string(readme), want, "docs/operations.md's ACL recipe is not the one tested")
	}
}

// With the recipe's user everything works: Warm, fenced acquire, extend,
// check, release and Do; Durability says the user may not read the
// settings, and with aclDurability reads them. The user can neither read
// nor write a key outside its patterns, and a lock named outside them is
// refused by the ACL, not reported as contention.
func TestLeastPrivilegeACL(t *testing.T) {
	ctx := t.Context()
	c := harness.Start(t, harness.Options{Nodes: 3})
	require.NoError(t, c.SetUser(ctx, "app", strings.Fields(aclRules)...))
	nodes := c.ClientsAs(t, "app", "app-secret")
	l := newLockerOn(t, nodes, &redlock.Options{Fencing: true, NodeTimeout: time.Second})

	require.NoError(t, l.Warm(ctx))
	trusted, err := l.TrustNewNodes(ctx) // the quick start's call: SCAN, the guard's examination, the trust script
	require.NoError(t, err)
	require.False(t, trusted, "the harness's nodes were trusted and examined before: not new")
	lease, err := l.TryLock(ctx, "lock:acl", 10*time.Second)
	require.NoError(t, err)
	require.NotZero(t, lease.Token())
	require.NoError(t, lease.Extend(ctx, 10*time.Second))
	require.NoError(t, lease.Check(ctx))
	require.NoError(t, lease.Unlock(ctx))
	require.NoError(t, l.Do(ctx, "lock:acl-do", 600*time.Millisecond, func(ctx context.Context, lease *redlock.Lease) error {
		time.Sleep(time.Second) // past the TTL: Do's extensions keep it
		return lease.Check(ctx)
	}))

	// The operator's view needs nothing more: Inspect, and Revoke with its
	// tombstone, which the holder's extension then reads.
	lease, err = l.TryLock(ctx, "lock:acl-ops", 10*time.Second)
	require.NoError(t, err)
	drain(t, l)
	in, err := l.Inspect(ctx, "lock:acl-ops")
	require.NoError(t, err)
	for _, n := range in.Nodes {
		require.NoError(t, n.Err, n.Name)
	}
	require.Equal(t, lease.Value(), in.Holder)
	_, err = l.Revoke(ctx, "lock:acl-ops")
	require.NoError(t, err)
	require.ErrorIs(t, lease.Extend(ctx, 10*time.Second), redlock.ErrNotHeld)

	for _, d := range l.Durability(ctx) {
		require.ErrorIs(t, d.Err, redlock.ErrNoPermission, "%s: Durability without config|get", d.Name)
		require.Contains(t, d.Err.Error(), "config|get")
	}
	require.NoError(t, c.SetUser(ctx, "app-durable", append(strings.Fields(aclRules), aclDurability)...))
	withConfig := newLockerOn(t, c.ClientsAs(t, "app-durable", "app-secret"), nil)
	for _, d := range withConfig.Durability(ctx) {
		require.NoError(t, d.Err, d.Name)
		require.Equal(t, "no", d.AppendOnly, d.Name)
	}

	app := nodes[0].(*redis.Client)
	require.ErrorContains(t, app.Set(ctx, "other", "v", 0).Err(), "NOPERM")
	require.NoError(t, c.Nodes[0].Admin.Set(ctx, "other", "v", 0).Err())
	require.ErrorContains(t, app.Get(ctx, "other").Err(), "NOPERM")
	_, err = l.TryLock(ctx, "other", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNoPermission)
	require.NotErrorIs(t, err, redlock.ErrNotObtained)
	drain(t, l)
	eventually(t, 5*time.Second, "no lock keys left (counters stay)", noKeys(ctx, c, "lock:*"))
}

// A user missing any one of the recipe's permissions gets an error that
// matches ErrNoPermission and names what is missing, never contention.
func TestACLMissingOnePermission(t *testing.T) {
	ctx := t.Context()
	c := harness.Start(t, harness.Options{Nodes: 3})
	newLocker(t, c, nil) // trusts the new nodes as the default user: the users below may not
	tryLock := func(l *redlock.Locker, key string) error {
		_, err := l.TryLock(ctx, key, 10*time.Second)
		return err
	}
	held := func(then func(*redlock.Lease) error) func(*redlock.Locker, string) error {
		return func(l *redlock.Locker, key string) error {
			lease, err := l.TryLock(ctx, key, 10*time.Second)
			if err != nil {
				return err
			}
			return then(lease)
		}
	}
	for i, tc := range []struct {
		drop, names string
		fenced      bool
		op          func(*redlock.Locker, string) error
		leavesKeys  bool
	}{
		{"+set", "set", false, tryLock, false},
		{"+get", "get", true, tryLock, false},
		{"+incr", "incr", true, tryLock, false},
		{"~{lock:*", "{lock:", true, tryLock, false},
		{"~redlock:memory*", "redlock:memory", false, tryLock, false},
		{"+time", "time", false, tryLock, false},
		{"+pttl", "pttl", false, tryLock, false},
		{"+pexpiretime", "pexpiretime", false, tryLock, false},
		{"+info", "info", false, func(l *redlock.Locker, key string) error {
			for _, n := range c.Nodes {
				require.NoError(t, n.FlushScripts(ctx))
			}
			return tryLock(l, key) // the node guard examines a node whose script cache is new
		}, false},
		{"+script|exists", "script exists", false, tryLock, false},
		{"+pexpire", "pexpire", false, held(func(l *redlock.Lease) error { return l.Extend(ctx, 10*time.Second) }), true},
		{"+del", "del", false, held(func(l *redlock.Lease) error { return l.Unlock(ctx) }), true},
		{"+evalsha", "evalsha", false, func(l *redlock.Locker, key string) error {
			// Warm records the scripts' digests (SCRIPT LOAD is allowed), so
			// that they go as EVALSHA: before a digest is known a script
			// goes as EVAL, which this user may send. Warm itself may meet
			// the refusal first: the node guard runs its examination by
			// EVALSHA once a copy was adopted (TrustNodes adopts one).
			if err := l.Warm(ctx); err != nil {
				return err
			}
			return held(func(l *redlock.Lease) error { return l.Check(ctx) })(l, key)
		}, true},
		{"+eval", "eval", false, held(func(l *redlock.Lease) error {
			for _, n := range c.Nodes {
				require.NoError(t, n.FlushScripts(ctx))
			}
			return l.Check(ctx) // EVALSHA meets NOSCRIPT; EVAL is refused
		}), true},
		{"+script|load", "script load", false, func(l *redlock.Locker, _ string) error { return l.Warm(ctx) }, false},
		{"+ping", "ping", false, func(l *redlock.Locker, _ string) error { return l.Warm(ctx) }, false},
		{"+scan", "scan", false, func(l *redlock.Locker, _ string) error {
			_, err := l.TrustNewNodes(ctx)
			return err
		}, false},
	} {
		t.Run(tc.drop, func(t *testing.T) {
			user := "app" + strings.NewReplacer("+", "-", "|", "-", "~", "-", "{", "", "*", "", ":", "").Replace(tc.drop)
			var rules []string
			for _, r := range strings.Fields(aclRules) {
				if r != tc.drop {
					rules = append(rules, r)
				}
			}
			require.Len(t, rules, len(strings.Fields(aclRules))-1, "the recipe has no %s", tc.drop)
			require.NoError(t, c.SetUser(ctx, user, rules...))
			l := newLockerOn(t, c.ClientsAs(t, user, "app-secret"), &redlock.Options{Fencing: tc.fenced, NodeTimeout: time.Second})
			key := "lock:missing-" + strings.Repeat("x", i+1)
			err := tc.op(l, key)
			require.Error(t, err, "without %s", tc.drop)
			require.ErrorIs(t, err, redlock.ErrNoPermission)
			require.NotErrorIs(t, err, redlock.ErrNotObtained, "an ACL refusal reported as contention")
			require.Contains(t, strings.ToLower(err.Error()), tc.names, "the error does not name what is missing")
			drain(t, l)
			if !tc.leavesKeys {
				eventually(t, 5*time.Second, "no keys left by the refused acquisition", noKeys(ctx, c, "*"+key+"*"))
			}
		})
	}
}

// The CLI runs against TLS nodes as an ACL user: -nodes takes
// rediss://user:pass@host:port, and -tls-ca, -tls-cert and -tls-key the
// test's certificates.
func TestCLIOnTLSNodesAsACLUser(t *testing.T) {
	ctx := t.Context()
	c := harness.Start(t, harness.Options{Nodes: 3, TLS: true})
	require.NoError(t, c.SetUser(ctx, "app", strings.Fields(aclRules)...))
	bin := filepath.Join(t.TempDir(), "redlock-bench")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/redlock-bench")
	build.Dir = filepath.Join("..", "..")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, "rediss://app:app-secret@"+n.Addr)
	}
	run := exec.CommandContext(ctx, bin, "-nodes", strings.Join(urls, ","), "-trust-nodes", "-tls-ca", c.Certs.CA(),
		"-tls-cert", c.Certs.ClientCert(), "-tls-key", c.Certs.ClientKey(),
		"-impl", "redlock", "-fencing", "-key-prefix", "lock:bench:", "-ops", "200", "-node-timeout", "1s", "-q")
	out, err = run.CombinedOutput()
	require.NoError(t, err, "redlock-bench: %s", out)
	require.Contains(t, string(out), " 0 errors in ", "redlock-bench: %s", out)
	require.Contains(t, string(out), "fencing true", "redlock-bench: %s", out)
}

// With the recipe's user, a waiter in another Locker is woken by the
// release (its poll is a minute away). Without the channel rules the
// release still succeeds (the script's publish is denied and skipped) and
// the waiter wins at its poll.
func TestACLWakeUps(t *testing.T) {
	ctx := t.Context()
	c := harness.Start(t, harness.Options{Nodes: 3})
	newLocker(t, c, nil) // trusts the new nodes as the default user
	for _, tc := range []struct {
		name string
		drop string
		poll time.Duration
	}{
		{"recipe", "", time.Minute},
		{"no-channels", "&{lock:*", time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rules []string
			for _, r := range strings.Fields(aclRules) {
				if r != tc.drop {
					rules = append(rules, r)
				}
			}
			user := "app-wake-" + tc.name
			require.NoError(t, c.SetUser(ctx, user, rules...))
			opts := &redlock.Options{NodeTimeout: time.Second, RetryDelay: tc.poll, RetryJitter: time.Millisecond}
			a := newLockerOn(t, c.ClientsAs(t, user, "app-secret"), opts)
			b := newLockerOn(t, c.ClientsAs(t, user, "app-secret"), opts)
			key := "lock:wake-" + tc.name
			held, err := a.TryLock(ctx, key, time.Minute)
			require.NoError(t, err)
			got := waitInBackground(t, b, key, 10*time.Second)
			if tc.drop == "" {
				for _, n := range c.Nodes {
					eventually(t, 5*time.Second, "a sharded subscriber on every node", func() (bool, error) {
						k, err := shardSubscribers(ctx, n.Admin, key)
						return k == 1, err
					})
				}
			} else {
				time.Sleep(200 * time.Millisecond)
			}
			released := time.Now()
			require.NoError(t, held.Unlock(ctx), "the release succeeds, published or not")
			r := <-got
			require.NoError(t, r.err)
			t.Logf("won %v after the release (poll every %v)", r.at.Sub(released), tc.poll)
			if tc.drop == "" {
				require.Less(t, r.at.Sub(released), 5*time.Second, "woken, not polled")
			}
			drain(t, a)
			drain(t, b)
		})
	}
}
