package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/redlock/redlock/test/integration/procs"
)

// The failure the node guard exists for, on one plain redis-server process
// that persists only by an explicit SAVE: the snapshot holds the guard's
// marker (written by TrustNodes) but not a lock granted after it; the
// process is killed and a new one loads the snapshot. The new process has
// forgotten the held key, and only the guard stands between it and a second
// grant. These tests check that the guard sees the new process however the
// node is reached, and however its first look at that process ends.

// guardMarker is the node guard's marker on a standalone node.
const guardMarker = "redlock:memory"

// The Lockers' MaxTTL, and the first lease's TTL: it is held for the whole
// test.
const (
	guardMaxTTL = time.Minute
	heldTTL     = 59 * time.Second
)

// TestGuardSeesANewProcessBehindEveryNodeKind: a restart from an old
// snapshot, behind every kind of Node New accepts, on both transports. The
// guard must quarantine the new process (its memory began less than MaxTTL
// ago), so the second TryLock of the held key fails with
// ErrNodeQuarantined. The negative control, NoQuarantine, shows the same
// flow granting the held lock a second time.
func TestGuardSeesANewProcessBehindEveryNodeKind(t *testing.T) {
	for _, kind := range []struct {
		name string
		node func(t *testing.T, addr string) redlock.Node
	}{
		{"Client", func(t *testing.T, addr string) redlock.Node {
			return closing(t, redis.NewClient(clientOptions(addr)))
		}},
		{"Client.WithTimeout", func(t *testing.T, addr string) redlock.Node {
			// The clone shares its parent's pool, which dials through the
			// parent's hooks, not the clone's.
			parent := closing(t, redis.NewClient(clientOptions(addr)))
			return parent.WithTimeout(2 * time.Second)
		}},
		{"UniversalClient", func(t *testing.T, addr string) redlock.Node {
			u := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, DialTimeout: 2 * time.Second})
			t.Cleanup(func() { u.Close() })
			return u
		}},
		{"Ring", func(t *testing.T, addr string) redlock.Node {
			r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"shard": addr}, DialTimeout: 2 * time.Second})
			t.Cleanup(func() { r.Close() })
			return r
		}},
		{"wrapper", func(t *testing.T, addr string) redlock.Node {
			return wrappedClient{closing(t, redis.NewClient(clientOptions(addr)))}
		}},
	} {
		t.Run(kind.name, func(t *testing.T) {
			for _, direct := range []bool{false, true} {
				t.Run(transportName(direct), func(t *testing.T) {
					for _, guarded := range []bool{true, false} {
						t.Run(map[bool]string{true: "guarded", false: "NoQuarantine control"}[guarded], func(t *testing.T) {
							ctx := t.Context()
							const key = "it:guard-process"
							s := startSnapshotServer(t)
							node := kind.node(t, s.Addr())
							l := lockerOver(t, node, &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: guardMaxTTL, NoAutoPipeline: direct, NoQuarantine: !guarded})
							require.NoError(t, l.TrustNodes(ctx))
							require.NoError(t, s.Admin().Save(ctx).Err(), "the snapshot: the marker, no lock")
							held, err := l.TryLock(ctx, key, heldTTL)
							require.NoError(t, err)

							before := s.crashAndRestart(t)
							waitAnswers(t, node)
							s.requireForgot(t, before, key, held.Value())

							second, err := l.TryLock(ctx, key, heldTTL)
							requireGuardDecides(t, l, held, second, err, guarded, "the guard did not see the new process behind a "+kind.name)
						})
					}
				})
			}
		})
	}
}

// TestFailedExaminationDoesNotVouchForANewProcess: the guard's first look
// at a restarted process (examine.lua, sent as EVAL since the new process
// has no scripts) fails, yet EVAL has put the script in the new process's
// cache. From then on SCRIPT EXISTS says the process is one the guard
// examined, and the guard must not believe it: the next TryLock of the held
// key must not be granted. The examination fails two ways:
//
//   - ACL: the restarted server's ACL (users are not in the snapshot) gives
//     the Locker's user docs/operations.md's ACL recipe without +info, which the
//     examination calls.
//   - OOM: the restarted process is over maxmemory (noeviction), so the
//     examination's SET of the marker is refused; reads still work. The
//     lock's own SET NX is refused too, so the examination is carried by a
//     Check of a bystander lease (a read-only script, allowed under OOM),
//     which both transports judge. Then memory is freed: the next TryLock
//     must find the node quarantined.
//
// Each has a control in which the examination succeeds (the full recipe;
// memory to spare), and the first TryLock after the restart is quarantined.
func TestFailedExaminationDoesNotVouchForANewProcess(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(transportName(direct), func(t *testing.T) {
			opts := &redlock.Options{NodeTimeout: 2 * time.Second, MaxTTL: guardMaxTTL, NoAutoPipeline: direct}

			for _, withInfo := range []bool{false, true} {
				t.Run(map[bool]string{false: "ACL without info", true: "ACL with info control"}[withInfo], func(t *testing.T) {
					ctx := t.Context()
					const key = "lock:guard-acl"
					s := startSnapshotServer(t)
					recipe := strings.Fields(aclRules)
					require.NoError(t, s.Admin().Do(ctx, aclSetUser("app", recipe)...).Err())
					trusted := lockerOver(t, closing(t, redis.NewClient(clientOptions(s.Addr()))), opts)
					require.NoError(t, trusted.TrustNodes(ctx), "the default user trusts the new node")
					require.NoError(t, s.Admin().Save(ctx).Err(), "the snapshot: the marker, no lock")
					appOpts := clientOptions(s.Addr())
					appOpts.Username, appOpts.Password = "app", "app-secret"
					app := closing(t, redis.NewClient(appOpts))
					l := lockerOver(t, app, opts)
					held, err := l.TryLock(ctx, key, heldTTL)
					require.NoError(t, err, "the recipe's user examines the node and is granted the lock")

					before := s.crashAndRestart(t)
					after := recipe
					if !withInfo {
						after = without(t, recipe, "+info")
					}
					require.NoError(t, s.Admin().Do(ctx, aclSetUser("app", after)...).Err())
					waitAnswers(t, app)
					s.requireForgot(t, before, key, held.Value())

					_, err = l.TryLock(ctx, key, heldTTL)
					if withInfo {
						require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "the control: an examination that runs sees the new process")
						drain(t, l)
						return
					}
					t.Logf("the first TryLock after the restart: %v", err)
					require.ErrorIs(t, err, redlock.ErrNoPermission, "the examination without +info")
					require.ErrorContains(t, err, "examine script")
					drain(t, l) // the refused grant's release
					s.requireFailedExamination(t, before, key)

					second, err := l.TryLock(ctx, key, heldTTL)
					// Still refused by the ACL, or quarantined: either is the guard's.
					requireNotVouched(t, held, second, err, redlock.ErrNoPermission, redlock.ErrNodeQuarantined)
					drain(t, l)
				})
			}

			for _, oom := range []bool{true, false} {
				t.Run(map[bool]string{true: "out of memory", false: "memory to spare control"}[oom], func(t *testing.T) {
					ctx := t.Context()
					const key, bystanderKey = "it:guard-oom", "it:guard-oom-bystander"
					s := startSnapshotServer(t, "--maxmemory-policy", "noeviction")
					node := closing(t, redis.NewClient(clientOptions(s.Addr())))
					l := lockerOver(t, node, opts)
					require.NoError(t, l.TrustNodes(ctx))
					const ballast = 4 << 20 // bytes, twice the restarted process's maxmemory
					require.NoError(t, s.Admin().SetRange(ctx, "it:ballast", ballast-1, "x").Err())
					require.NoError(t, s.Admin().Save(ctx).Err(), "the snapshot: the marker and the ballast, no lock")
					held, err := l.TryLock(ctx, key, heldTTL)
					require.NoError(t, err)
					bystander, err := l.TryLock(ctx, bystanderKey, heldTTL)
					require.NoError(t, err)

					var restart []string
					if oom {
						restart = []string{"--maxmemory", "2mb"}
					}
					before := s.crashAndRestart(t, restart...)
					waitAnswers(t, node)
					s.requireForgot(t, before, key, held.Value())

					if !oom {
						_, err = l.TryLock(ctx, key, heldTTL)
						require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "the control: an examination that runs sees the new process")
						drain(t, l)
						return
					}
					probe := s.Admin().Set(ctx, "it:probe", "x", 0).Err()
					require.True(t, redis.HasErrorPrefix(probe, "OOM"), "the restarted process refuses writes: %v", probe)
					require.NoError(t, s.Admin().PTTL(ctx, guardMarker).Err(), "reads still work")

					_, err = l.TryLock(ctx, key, heldTTL)
					t.Logf("the first TryLock after the restart: %v", err)
					require.Error(t, err)
					require.True(t, redis.HasErrorPrefix(err, "OOM"), "the lock's SET NX is refused under OOM: %v", err)
					// A guarded round trip that OOM does not refuse: the
					// bystander's key is gone too, and its Check carries the
					// examination, whose SET of the marker is refused.
					require.ErrorIs(t, bystander.Check(ctx), redlock.ErrNotHeld)
					drain(t, l)
					s.requireFailedExamination(t, before, key)

					require.NoError(t, s.Admin().ConfigSet(ctx, "maxmemory", "0").Err())
					require.NoError(t, s.Admin().Set(ctx, "it:probe", "x", 0).Err(), "memory freed: writes work again")
					// After failed examinations the guard spaces out new ones
					// (its votes fail meanwhile): try until it examines.
					deadline := time.Now().Add(10 * time.Second)
					for {
						second, err := l.TryLock(ctx, key, heldTTL)
						if second != nil || errors.Is(err, redlock.ErrNodeQuarantined) || time.Now().After(deadline) {
							requireNotVouched(t, held, second, err, redlock.ErrNodeQuarantined)
							break
						}
						require.ErrorContains(t, err, "after failed examinations", "only the guard's backoff may refuse before it examines")
					}
					drain(t, l)
				})
			}
		})
	}
}

// requireGuardDecides checks the second TryLock (second, err) of held's
// key while held is valid: granted without the guard (the negative
// control, which releases it again), refused as a quarantine with it
// (failure says what a grant would mean).
func requireGuardDecides(t *testing.T, l *redlock.Locker, held, second *redlock.Lease, err error, guarded bool, failure string) {
	t.Helper()
	left := held.Validity()
	require.Positive(t, left, "the first lease ran out: a second grant would prove nothing")
	if !guarded {
		require.NoError(t, err, "the negative control: without the guard the node grants the held lock again")
		require.NoError(t, second.Unlock(t.Context()))
		drain(t, l)
		return
	}
	require.ErrorIs(t, err, redlock.ErrNodeQuarantined, "%s: a second lease of %q while the first is valid for %v more", failure, held.Key(), left)
	require.Nil(t, second)
	t.Logf("refused: %v", err)
	drain(t, l)
}

// requireNotVouched fails the test if the TryLock that returned (second,
// err) was granted while held is valid, or was refused for a reason other
// than the guard's (one of want). Contention would not do: the key is not
// on the node.
func requireNotVouched(t *testing.T, held, second *redlock.Lease, err error, want ...error) {
	t.Helper()
	left := held.Validity()
	require.Positive(t, left, "the first lease ran out: a second grant would prove nothing")
	if second != nil {
		require.Failf(t, "a second holder", "a second lease of %q granted while the first is valid for %v more: the failed examination's cached script vouched for the new process", held.Key(), left)
	}
	t.Logf("refused: %v", err)
	for _, w := range want {
		if errors.Is(err, w) {
			return
		}
	}
	require.Failf(t, "refused, but not by the guard", "want one of %v; got %v", want, err)
}

// snapshotServer is one redis-server process on 127.0.0.1 that persists
// only by an explicit SAVE (save "", no AOF), and that a test kills and
// starts again on the same port and files, so that the new process loads
// the last snapshot.
type snapshotServer struct {
	bin, conf string
	port      int
	proc      *procs.Proc
}

// processState is what requireForgot compares a restarted process with.
type processState struct {
	runID, marker string
}

func startSnapshotServer(t *testing.T, args ...string) *snapshotServer {
	t.Helper()
	port, err := procs.FreePort()
	require.NoError(t, err)
	dir := t.TempDir()
	s := &snapshotServer{bin: procs.Binary(t, harness.SuiteServer(), "server"), conf: filepath.Join(dir, "redis.conf"), port: port}
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\ndbfilename dump.rdb\nsave \"\"\nappendonly no\n", port, dir)
	require.NoError(t, os.WriteFile(s.conf, []byte(conf), 0o644))
	s.proc = procs.Start(t, "snapshot server", s.bin, port, append([]string{s.conf}, args...)...)
	return s
}

func (s *snapshotServer) Addr() string { return s.proc.Addr }

// Admin is a default-user client of the current process.
func (s *snapshotServer) Admin() *redis.Client { return s.proc.Client }

// crashAndRestart kills the process (SIGKILL: nothing is saved on the way
// down) and starts a new one on the same port and files, with args after
// the configuration file; the new process has loaded the last snapshot
// once it answers PING (procs.Start waits for that). It returns the killed
// process's run_id and marker.
func (s *snapshotServer) crashAndRestart(t *testing.T, args ...string) processState {
	t.Helper()
	before := s.state(t)
	s.proc.Kill()
	s.proc = procs.Start(t, "snapshot server (restarted)", s.bin, s.port, append([]string{s.conf}, args...)...)
	return before
}

func (s *snapshotServer) state(t *testing.T) processState {
	t.Helper()
	info, err := s.Admin().Info(t.Context(), "server").Result()
	require.NoError(t, err)
	_, rest, _ := strings.Cut(info, "run_id:")
	id, _, _ := strings.Cut(rest, "\r\n")
	require.NotEmpty(t, id, "no run_id in INFO server")
	marker, err := s.Admin().Get(t.Context(), guardMarker).Result()
	require.NoError(t, err, "the guard's marker")
	return processState{runID: id, marker: marker}
}

// requireForgot checks that the restarted process is the failure the
// guard is for: a new process, which loaded the snapshot (the killed
// process's marker is back) and has forgotten the held key.
func (s *snapshotServer) requireForgot(t *testing.T, before processState, key, value string) {
	t.Helper()
	now := s.state(t)
	require.NotEqual(t, before.runID, now.runID, "not a new process")
	require.Equal(t, before.marker, now.marker, "the snapshot's marker was not loaded")
	got, err := s.Admin().Get(t.Context(), key).Result()
	require.ErrorIs(t, err, redis.Nil, "the restarted process still holds %q (%q; the lease's value is %q)", key, got, value)
}

// requireFailedExamination checks that the guard's examination of the new
// process ran and failed: a script is in its cache (the new process began
// with none, and only the examination sends one; EVAL caches it before it
// runs) and the marker is the killed process's still (an
// examination that succeeds rewrites it with the new run_id). And that the
// key is not on the node, so that only the guard can refuse a grant.
func (s *snapshotServer) requireFailedExamination(t *testing.T, before processState, key string) {
	t.Helper()
	info, err := s.Admin().Info(t.Context(), "memory").Result()
	require.NoError(t, err)
	require.NotContains(t, info, "number_of_cached_scripts:0\r\n", "no script is cached: no examination ran")
	require.Contains(t, info, "number_of_cached_scripts:", "the server does not count its cached scripts")
	require.Equal(t, before.marker, s.state(t).marker, "the examination rewrote the marker: it succeeded")
	n, err := s.Admin().Exists(t.Context(), key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "%q is on the node: a refusal would be contention, not the guard", key)
}

// waitAnswers waits until node answers PING through its own client, as
// the Locker reaches it (a Ring marks a shard up again by its heartbeat).
func waitAnswers(t *testing.T, node redlock.Node) {
	t.Helper()
	procs.WaitFor(t, 10*time.Second, "the node answers PING through its client", func() (bool, error) {
		err := node.Do(t.Context(), "ping").Err()
		return err == nil, err
	})
}

// lockerOver is a Locker on one node, with the transport opts says (not
// REDLOCK_TEST_TRANSPORT's: these tests run both), drained when the test
// ends.
func lockerOver(t *testing.T, node redlock.Node, opts *redlock.Options) *redlock.Locker {
	t.Helper()
	l, err := redlock.New([]redlock.Node{node}, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Drain(context.WithoutCancel(t.Context())) })
	return l
}

// wrappedClient is a Node of the user's own type around a *redis.Client,
// as an instrumented or namespaced client would be.
type wrappedClient struct{ *redis.Client }

func clientOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, DialTimeout: 2 * time.Second}
}

// closing closes c when the test ends.
func closing(t *testing.T, c *redis.Client) *redis.Client {
	t.Cleanup(func() { c.Close() })
	return c
}

func transportName(direct bool) string {
	if direct {
		return "direct"
	}
	return "pipelined"
}

func aclSetUser(name string, rules []string) []any {
	args := []any{"ACL", "SETUSER", name, "reset"}
	for _, r := range rules {
		args = append(args, r)
	}
	return args
}

// without returns rules less drop, which must be among them.
func without(t *testing.T, rules []string, drop string) []string {
	t.Helper()
	var out []string
	for _, r := range rules {
		if r != drop {
			out = append(out, r)
		}
	}
	require.Len(t, out, len(rules)-1, "no %s in the rules", drop)
	return out
}
