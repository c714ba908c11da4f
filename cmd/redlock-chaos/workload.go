package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redlock/redlock/fence"
	"github.com/redlock/redlock/redlock"
)

// leaseRecord is one lease as its client saw it. Times are from the run's
// start, on the process's monotonic clock, which every client shares.
type leaseRecord struct {
	Client   int           `json:"client"`
	Key      int           `json:"key"`
	Token    uint64        `json:"token,omitempty"`
	Call     time.Duration `json:"call"`     // Lock called
	Acquired time.Duration `json:"acquired"` // Lock returned it
	Until    time.Duration `json:"until"`    // the validity the client believed it had
	Released time.Duration `json:"released"` // Unlock called (0: never)
	// Holders is how many nodes held the lease when Lock returned it, as
	// the Locker knew (late grants may add to it afterwards).
	Holders int `json:"holders"`
}

// end is when the client stopped believing it held the lease: the end of its
// validity, or its release if earlier.
func (l leaseRecord) end() time.Duration {
	if l.Released > 0 && l.Released < l.Until {
		return l.Released
	}
	return l.Until
}

// access is one read or write of the resource under a lease.
type access struct {
	Lease    int           `json:"lease"` // index in the leases
	Write    bool          `json:"write"`
	Call     time.Duration `json:"call"`
	Return   time.Duration `json:"return"`
	Value    int64         `json:"value"`    // read, or written
	Accepted bool          `json:"accepted"` // applied (a read: answered)
	Unknown  bool          `json:"unknown"`  // failed without saying whether it applied
}

// history is everything the clients did, for the referee.
type history struct {
	mu       sync.Mutex
	leases   []leaseRecord
	accesses []access
	errors   map[string]int
	// pastBound counts lock calls that returned later than their
	// context's deadline plus slack.
	pastBound int
	calls     int
}

func (h *history) addLease(l leaseRecord) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leases = append(h.leases, l)
	return len(h.leases) - 1
}

func (h *history) released(i int, at time.Duration) {
	h.mu.Lock()
	h.leases[i].Released = at
	h.mu.Unlock()
}

func (h *history) addAccess(a access) {
	h.mu.Lock()
	h.accesses = append(h.accesses, a)
	h.mu.Unlock()
}

func (h *history) failed(op string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	kind := "other"
	switch {
	case errors.Is(err, redlock.ErrNodeQuarantined):
		kind = "quarantined"
	case errors.Is(err, redlock.ErrNotObtained):
		kind = "not obtained"
	case errors.Is(err, redlock.ErrNotHeld):
		kind = "not held"
	case errors.Is(err, fence.ErrStaleToken):
		kind = "stale token"
	case errors.Is(err, context.DeadlineExceeded):
		kind = "deadline"
	}
	h.errors[op+": "+kind]++
}

// bounded records a call with a deadline that returned at returned.
func (h *history) bounded(deadline, returned time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if returned.Sub(deadline) > boundSlack {
		h.pastBound++
	}
}

// boundSlack is how late past its deadline a lock call may return before the
// referee counts it: the scheduler of a loaded 2-core machine.
const boundSlack = 250 * time.Millisecond

// client is one worker: take a lease on a random key, read the key's
// counter, write it back plus one, release; again until ctx ends.
type client struct {
	id     int
	locker *redlock.Locker
	res    *resources
	cfg    config
	start  time.Time
	hist   *history
	pauses <-chan *fault
	rng    *rand.Rand
}

func lockName(key int) string    { return "chaos:lock:" + strconv.Itoa(key) }
func counterName(key int) string { return "chaos:counter:" + strconv.Itoa(key) }

func (c *client) since() time.Duration { return time.Since(c.start) }

func (c *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		c.cycle(ctx)
	}
}

func (c *client) cycle(ctx context.Context) {
	key := c.rng.IntN(c.cfg.keys)
	lctx, cancel := context.WithTimeout(ctx, 3*c.cfg.ttl)
	defer cancel()
	call := c.since()
	lease, err := c.locker.Lock(lctx, lockName(key), c.cfg.ttl)
	if d, ok := lctx.Deadline(); ok && ctx.Err() == nil {
		c.hist.bounded(d, time.Now())
	}
	if err != nil {
		if ctx.Err() == nil {
			c.hist.failed("lock", err)
		}
		return
	}
	rec := leaseRecord{Client: c.id, Key: key, Token: lease.Token(), Call: call, Acquired: c.since(), Until: lease.Until().Sub(c.start), Holders: lease.Holders()}
	li := c.hist.addLease(rec)
	defer func() {
		// The release runs even when the run has ended: keys left behind
		// are the referee's to count, not the workload's to cause.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ttl)
		defer cancel()
		// The client stops relying on the lease when it calls Unlock:
		// another may acquire before this call returns.
		c.hist.released(li, c.since())
		err := lease.Unlock(uctx)
		d, _ := uctx.Deadline()
		c.hist.bounded(d, time.Now())
		if err != nil {
			c.hist.failed("unlock", err)
		}
	}()
	// The resource is never faulted, but its calls are bounded all the same.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	read := access{Lease: li, Call: c.since()}
	value, err := c.res.of(key).read(rctx, key, lease.Token())
	read.Return, read.Value = c.since(), value
	read.Accepted = err == nil
	read.Unknown = err != nil && !errors.Is(err, fence.ErrStaleToken)
	c.hist.addAccess(read)
	if err != nil {
		c.hist.failed("read", err)
		return
	}
	time.Sleep(c.cfg.hold) // the work the lock protects
	select {
	case f := <-c.pauses:
		began := c.since()
		time.Sleep(f.For)
		c.hist.mu.Lock()
		f.Began, f.Ended = began, c.since()
		c.hist.mu.Unlock()
	default:
	}
	// The write's own bound, from now: a pause must not spend it, or the
	// paused write would never be sent and fencing never tested.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer wcancel()
	write := access{Lease: li, Write: true, Call: c.since(), Value: value + 1}
	err = c.res.of(key).write(wctx, key, value+1, lease.Token())
	write.Return = c.since()
	write.Accepted = err == nil
	write.Unknown = err != nil && !errors.Is(err, fence.ErrStaleToken)
	c.hist.addAccess(write)
	if err != nil {
		c.hist.failed("write", err)
	}
}
