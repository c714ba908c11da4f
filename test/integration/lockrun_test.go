package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/redlock/redlock/test/integration/procs"
)

// clusterAndTwo starts, as plain processes on 127.0.0.1, a 3-master Redis
// Cluster with replicasEach replicas per master and two standalone
// primaries, each with a replica when replicated: Redlock's three nodes,
// one of them a cluster.
func clusterAndTwo(t *testing.T, replicasEach int, replicated bool) (*procs.Cluster, []*procs.Proc) {
	t.Helper()
	server := harness.SuiteServer()
	cluster := procs.StartCluster(t, server, 3, replicasEach)
	bin := procs.Binary(t, server, "server")
	var standalone []*procs.Proc
	for i := range 2 {
		port, err := procs.FreePort()
		require.NoError(t, err)
		p := procs.Start(t, fmt.Sprintf("standalone %d primary", i), bin, port, "--save", "", "--appendonly", "no")
		if replicated {
			procs.ReplicaOf(t, fmt.Sprintf("standalone %d replica", i), bin, p, "--save", "", "--appendonly", "no")
		}
		standalone = append(standalone, p)
	}
	return cluster, standalone
}

// lockersOver returns n Lockers, each over its own ClusterClient of cluster
// and its own clients of the standalone nodes.
func lockersOver(t *testing.T, n int, cluster *procs.Cluster, standalone []*procs.Proc, opts *redlock.Options) []*redlock.Locker {
	t.Helper()
	var lockers []*redlock.Locker
	for range n {
		nodes := []redlock.Node{cluster.Client(t)}
		for _, p := range standalone {
			nodes = append(nodes, clientOf(t, p))
		}
		lockers = append(lockers, newLockerOn(t, nodes, opts))
	}
	return lockers
}

// lockRun is a few clients that keep taking one fenced lock, extending and
// checking it inside, until stopped, while a test does something to the
// nodes underneath. It records what a holder must never see: two holders
// at once, a token that did not grow, a lease lost while held, and a
// TRYAGAIN reported as contention.
type lockRun struct {
	work context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu               sync.Mutex
	inside, overlaps int
	lastToken        uint64
	regressed, lost  []string
	misread          []string
	acquired, errs   int
	lastErr          error
	phase            []string // each client's step, for a failure's message
	describe         func() string

	// While nodesDown, a node of the lock is down (killed, or failing
	// over), so a lease held by a bare majority that included it cannot be
	// confirmed: such a lease is counted in unconfirmed, not lost. It must
	// still never meet another holder's value: a refusal ("held by another
	// value") while another client holds a lease is lost. Without one, the
	// value is a leftover on a node this lease never held (a released
	// lease's key whose release was still on its way, or a failed attempt's
	// grant being released), and the lease is unconfirmed.
	nodesDown   bool
	unconfirmed int
}

// startLockRun starts one client per Locker on key with ttl, and stops them
// when the test ends.
func startLockRun(t *testing.T, lockers []*redlock.Locker, key string, ttl time.Duration) *lockRun {
	r := &lockRun{}
	r.work, r.stop = context.WithCancel(t.Context())
	r.phase = make([]string, len(lockers))
	for i, l := range lockers {
		r.wg.Go(func() { r.client(i, l, key, ttl) })
	}
	t.Cleanup(r.end)
	return r
}

func (r *lockRun) at(i int, step string) {
	r.mu.Lock()
	r.phase[i] = step + " since " + time.Now().Format("15:04:05.000")
	r.mu.Unlock()
}

func (r *lockRun) client(i int, l *redlock.Locker, key string, ttl time.Duration) {
	for r.work.Err() == nil {
		r.at(i, "Lock")
		lctx, cancel := context.WithTimeout(r.work, 3*ttl/2)
		lease, err := l.Lock(lctx, key, ttl)
		cancel()
		if err != nil {
			r.mu.Lock()
			if strings.Contains(err.Error(), "TRYAGAIN") && errors.Is(err, redlock.ErrNotObtained) && !strings.Contains(err.Error(), "held by another value") {
				r.misread = append(r.misread, err.Error())
			}
			r.errs++
			r.lastErr = err
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		r.inside++
		if r.inside > 1 {
			r.overlaps++
		}
		if lease.Token() <= r.lastToken {
			r.regressed = append(r.regressed, fmt.Sprintf("%d after %d", lease.Token(), r.lastToken))
		}
		r.lastToken = max(r.lastToken, lease.Token())
		r.acquired++
		r.mu.Unlock()
		r.at(i, fmt.Sprintf("Extend of token %d", lease.Token()))
		err = lease.Extend(r.work, ttl)
		if err == nil {
			r.at(i, "Check")
			err = lease.Check(r.work)
		}
		r.mu.Lock()
		switch {
		case err == nil || r.work.Err() != nil:
		case r.nodesDown && (!strings.Contains(err.Error(), "held by another value") || r.inside == 1):
			r.unconfirmed++
		default:
			r.lost = append(r.lost, fmt.Sprintf("token %d: %v", lease.Token(), err))
		}
		r.inside--
		r.mu.Unlock()
		r.at(i, "Unlock")
		_ = lease.Unlock(context.WithoutCancel(r.work))
	}
}

// setNodesDown says whether a node of the lock is down from now on.
func (r *lockRun) setNodesDown(down bool) {
	r.mu.Lock()
	r.nodesDown = down
	r.mu.Unlock()
}

// progress waits until the clients take n more leases.
func (r *lockRun) progress(t *testing.T, n int, what string) {
	t.Helper()
	count := func() (int, error, []string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.acquired, r.lastErr, slices.Clone(r.phase)
	}
	before, _, _ := count()
	deadline := time.Now().Add(30 * time.Second)
	for {
		now, err, phase := count()
		if now >= before+n {
			return
		}
		if time.Now().After(deadline) {
			more := ""
			if r.describe != nil {
				more = r.describe()
			}
			t.Fatalf("%s: %d of %d leases after 30s; the clients are at %q; the last failed attempt: %v%s", what, now-before, n, phase, err, more)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *lockRun) end() {
	r.stop()
	r.wg.Wait()
}

// verify stops the clients and fails the test on anything a holder must
// never see.
func (r *lockRun) verify(t *testing.T) {
	t.Helper()
	r.end()
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Logf("%d leases, last token %d, %d failed attempts, %d leases unconfirmed while a node was down", r.acquired, r.lastToken, r.errs, r.unconfirmed)
	require.Zero(t, r.overlaps, "two holders at once")
	require.Empty(t, r.regressed, "fencing tokens that did not grow")
	require.Empty(t, r.lost, "leases lost while held (Extend or Check failed)")
	require.Empty(t, r.misread, "TRYAGAIN reported as contention")
}
