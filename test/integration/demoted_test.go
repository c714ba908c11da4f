package integration

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/redlock/redlock/test/integration/procs"
)

// TestDemotedPrimaryIsLeft: a node reached through a name that moves (a
// proxy here, as DNS or a managed endpoint would) from its primary to the
// replica promoted in its place, while the clients' open connections stay
// with the old primary, now demoted to a replica (of an address where
// nothing answers: its copy of the keys never catches up). Its answer to an
// acquisition's SET is READONLY. go-redis closes a connection that answers
// READONLY, so that the next command dials the name again and reaches the
// new primary; the auto-pipeline reads its SETs' replies itself, and must
// hand such a reply to go-redis the same way. On both transports the
// Locker must be granted within a few attempts, and every later check,
// extension and release must be answered by the new primary: a release
// on the demoted primary's lagging copy answered "key missing" (Unlock
// returned ErrNotHeld and the key stayed for its TTL) until the scripts
// answered READONLY on a replica. (Before raw replies were handed back,
// the auto-pipeline kept its connections to the demoted primary and failed
// every acquisition.)
func TestDemotedPrimaryIsLeft(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(transportName(direct), func(t *testing.T) {
			ctx := t.Context()
			bin := procs.Binary(t, harness.SuiteServer(), "server")
			port, err := procs.FreePort()
			require.NoError(t, err)
			primary := procs.Start(t, "primary", bin, port, "--save", "", "--appendonly", "no")
			replica := procs.ReplicaOf(t, "replica", bin, primary, "--save", "", "--appendonly", "no")
			name, err := faultnet.Listen(primary.Addr)
			require.NoError(t, err)
			t.Cleanup(func() { name.Close() })
			node := closing(t, redis.NewClient(&redis.Options{Addr: name.Addr(), DialTimeout: time.Second, PoolSize: 4}))
			l := lockerOver(t, node, &redlock.Options{NodeTimeout: time.Second, NoAutoPipeline: direct, NoQuarantine: true})
			// Connections open to the old primary: as many as the pool
			// holds, by concurrent calls.
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					lease, err := l.TryLock(ctx, "it:demoted:warm:"+strconv.Itoa(i), 10*time.Second)
					if assert.NoError(t, err) {
						assert.NoError(t, lease.Unlock(ctx))
					}
				})
			}
			wg.Wait()

			require.NoError(t, replica.Client.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
			name.SetTarget(replica.Addr)
			// The demoted primary replicates from nowhere (its link never
			// comes up), so that its copy never catches up: every key the
			// new primary sets is missing there.
			nowhere, err := procs.FreePort()
			require.NoError(t, err)
			require.NoError(t, primary.Client.Do(ctx, "REPLICAOF", "127.0.0.1", nowhere).Err())
			procs.WaitFor(t, 10*time.Second, "the old primary is a replica", func() (bool, error) {
				role, err := primary.Client.Do(ctx, "ROLE").Slice()
				return err == nil && len(role) > 0 && role[0] == "slave", err
			})

			start := time.Now()
			var failures []error
			for attempt := 0; ; attempt++ {
				lease, err := l.TryLock(ctx, "it:demoted", 10*time.Second)
				if err == nil {
					t.Logf("granted by the new primary after %d failed attempts in %v: %v", attempt, time.Since(start).Round(time.Millisecond), errors.Join(failures...))
					n, err := replica.Client.Exists(ctx, "it:demoted").Result()
					require.NoError(t, err)
					require.EqualValues(t, 1, n, "the key is on the new primary")
					require.NoError(t, lease.Unlock(ctx))
					break
				}
				failures = append(failures, err)
				require.Less(t, attempt, 8, "still refused after %d attempts in %v: %v", attempt+1, time.Since(start), err)
			}
			// Every call after that, on whichever connection it finds:
			// the demoted primary's copy of a key (missing, or lagging)
			// must never answer for the node.
			for i := range 16 {
				key := "it:demoted:" + strconv.Itoa(i)
				lease, err := l.TryLock(ctx, key, 10*time.Second)
				require.NoError(t, err)
				require.NoError(t, lease.Check(ctx))
				require.NoError(t, lease.Extend(ctx, 10*time.Second))
				require.NoError(t, lease.Unlock(ctx), "a release answered by the demoted primary")
				drain(t, l)
				n, err := replica.Client.Exists(ctx, key).Result()
				require.NoError(t, err)
				require.Zero(t, n, "%s left on the new primary after Unlock returned nil", key)
			}
			drain(t, l)
		})
	}
}

// A lease revoked by an operator, whose node is then demoted before the
// holder's next check or extension (a failover the revocation did not
// reach: the new primary may still hold the key): the demoted copy's
// tombstone, like its missing key, is a lagging copy's word, not the
// node's. The check and the extension answer READONLY there, so that the
// client asks the primary again, and never take the lease for revoked (or
// lost) on the replica's word. One key and two (every lease is one shape:
// the same scripts).
func TestDemotedPrimarysTombstoneIsNotTheNodesWord(t *testing.T) {
	for _, keys := range [][]string{{"it:revoked"}, {"it:revoked:a", "it:revoked:b"}} {
		for _, op := range []string{"Check", "Extend"} {
			t.Run(strconv.Itoa(len(keys))+" key(s)/"+op, func(t *testing.T) {
				ctx := t.Context()
				bin := procs.Binary(t, harness.SuiteServer(), "server")
				port, err := procs.FreePort()
				require.NoError(t, err)
				primary := procs.Start(t, "primary", bin, port, "--save", "", "--appendonly", "no")
				node := closing(t, redis.NewClient(&redis.Options{Addr: primary.Addr, DialTimeout: time.Second, MaxRetries: -1}))
				l := lockerOver(t, node, &redlock.Options{NodeTimeout: 2 * time.Second, NoQuarantine: true})
				lease, err := l.TryLockMulti(ctx, keys, time.Minute)
				require.NoError(t, err)
				operator := lockerOver(t, closing(t, redis.NewClient(&redis.Options{Addr: primary.Addr})), &redlock.Options{NoQuarantine: true})
				for _, k := range keys {
					_, err := operator.Revoke(ctx, k)
					require.NoError(t, err)
				}
				nowhere, err := procs.FreePort()
				require.NoError(t, err)
				require.NoError(t, primary.Client.Do(ctx, "REPLICAOF", "127.0.0.1", nowhere).Err())
				procs.WaitFor(t, 10*time.Second, "the primary is a replica", func() (bool, error) {
					role, err := primary.Client.Do(ctx, "ROLE").Slice()
					return err == nil && len(role) > 0 && role[0] == "slave", err
				})
				if op == "Check" {
					err = lease.Check(ctx)
				} else {
					err = lease.Extend(ctx, time.Minute)
				}
				t.Logf("%s on the demoted node: %v", op, err)
				require.Error(t, err)
				require.NotErrorIs(t, err, redlock.ErrNotHeld, "a replica's tombstone was taken for the node's word")
				require.ErrorContains(t, err, "READONLY")
			})
		}
	}
}
