package main

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// mixedRollout runs, on five in-process servers, clients of this library
// and clients of redsync taking the same lock names, as during a rollout
// from one to the other: each side TryLocks in a loop, holds briefly, and
// releases. redsyncName maps a lock's name to the mutex name redsync
// uses. It returns the leases each side won and how often two holders held
// one name at once.
func mixedRollout(t *testing.T, redsyncName func(string) string) (ours, theirs, overlaps int64) {
	var nodes []redlock.Node
	var pools []redsyncredis.Pool
	for range 5 {
		srv := miniredis.RunT(t)
		a := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		b := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { a.Close(); b.Close() })
		nodes = append(nodes, a)
		pools = append(pools, redsyncgoredis.NewPool(b))
	}
	l, err := redlock.New(nodes, &redlock.Options{NodeTimeout: 5 * time.Second})
	require.NoError(t, err)
	require.NoError(t, l.TrustNodes(t.Context())) // new servers, no locks
	rs := redsync.New(pools...)

	names := []string{"account:1", "account:2"}
	holders := map[string]*atomic.Int32{names[0]: {}, names[1]: {}}
	var won [2]atomic.Int64
	var overlapped atomic.Int64
	held := func(name string) func() {
		if holders[name].Add(1) > 1 {
			overlapped.Add(1)
		}
		time.Sleep(500 * time.Microsecond)
		return func() { holders[name].Add(-1) }
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 60 {
				name := names[(g+i)%len(names)]
				if g%2 == 0 { // this library
					lease, err := l.TryLock(t.Context(), name, 5*time.Second)
					if errors.Is(err, redlock.ErrNotObtained) {
						continue
					}
					if !assert.NoError(t, err) {
						return
					}
					won[0].Add(1)
					held(name)()
					assert.NoError(t, lease.Unlock(t.Context()))
					continue
				}
				m := rs.NewMutex(redsyncName(name), redsync.WithExpiry(5*time.Second), redsync.WithTries(1))
				if err := m.TryLockContext(t.Context()); err != nil {
					continue // taken (redsync says ErrFailed or ErrTaken)
				}
				won[1].Add(1)
				held(name)()
				ok, err := m.UnlockContext(context.WithoutCancel(t.Context()))
				assert.True(t, ok && err == nil, "redsync unlock: %v %v", ok, err)
			}
		})
	}
	wg.Wait()
	require.NoError(t, l.Drain(t.Context()))
	return won[0].Load(), won[1].Load(), overlapped.Load()
}

// This library and redsync can run on the same lock names during a
// rollout: both set the name with SET NX PX and a random value and release
// by compare-and-delete, so their leases exclude each other (no overlap),
// and neither deletes the other's. The control names redsync's mutexes
// apart from the locks (as a rollout that renamed its keys would): the
// two sides then do not exclude each other, and the same count sees them
// overlap.
func TestRedsyncAndThisLibraryExcludeEachOtherOnTheSameKeys(t *testing.T) {
	ours, theirs, overlaps := mixedRollout(t, func(name string) string { return name })
	t.Logf("same names: %d leases of this library, %d of redsync, %d overlaps", ours, theirs, overlaps)
	assert.Zero(t, overlaps, "a lease of each library held one name at once")
	assert.Positive(t, ours)
	assert.Positive(t, theirs)

	_, _, apart := mixedRollout(t, func(name string) string { return name + ":renamed" })
	t.Logf("control, names apart: %d overlaps", apart)
	assert.Positive(t, apart, "the control: locks on different names must be seen to overlap")
}
