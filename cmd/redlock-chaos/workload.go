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
	Until    time.Duration `json:"until"`    // the validity the client believed it had when Lock returned
	// Extended is the later validity it believed before its writes, where
	// Do had extended the lease (0: none).
	Extended time.Duration `json:"extended,omitempty"`
	Released time.Duration `json:"released"` // Unlock called, or Do's function returned (0: never)
	// Holders is how many nodes held the lease when Lock returned it, as
	// the Locker knew (late grants may add to it afterwards).
	Holders int `json:"holders"`
	// Shape is how the lease was taken: "" (Lock), "multi" (LockMulti,
	// one record per key) or "do" (Locker.Do).
	Shape string `json:"shape,omitempty"`
}

// end is when the client stopped believing it held the lease: the end of its
// validity (extended, where it was), or its release if earlier.
func (l leaseRecord) end() time.Duration {
	if l.Released > 0 && l.Released < l.believed() {
		return l.Released
	}
	return l.believed()
}

// believed is the end of the validity the client last believed the lease
// had.
func (l leaseRecord) believed() time.Duration { return max(l.Until, l.Extended) }

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

// released records when the client stopped relying on the leases of
// records: its Unlock call, or the end of Do's function.
func (h *history) released(records []int, at time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, i := range records {
		if h.leases[i].Released == 0 {
			h.leases[i].Released = at
		}
	}
}

// extended records the validity the client believed its leases had
// before their writes: later than at acquisition where Do extended them.
func (h *history) extended(records []int, until time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, i := range records {
		if until > h.leases[i].Until {
			h.leases[i].Extended = until
		}
	}
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

// cycle takes one lease and does its work: a single key's (Lock), or,
// with -mixed, also two keys' at once (LockMulti) and a single key's under
// Do, whose work lasts longer than the TTL so that its extensions keep the
// lease.
func (c *client) cycle(ctx context.Context) {
	keys := []int{c.rng.IntN(c.cfg.keys)}
	shape := "" // Lock
	if c.cfg.mixed {
		shape = [...]string{"", "multi", "do", ""}[c.rng.IntN(4)]
	}
	switch {
	case shape == "do":
		// Do's context bounds its wait and its function alike: the wait
		// gets what Lock's does, and the function its three holds.
		dctx, cancel := context.WithTimeout(ctx, 3*c.cfg.ttl+3*c.cfg.hold)
		defer cancel()
		c.doCycle(ctx, dctx, keys[0])
		return
	case shape == "multi" && c.cfg.keys >= 2:
		keys = append(keys, (keys[0]+1+c.rng.IntN(c.cfg.keys-1))%c.cfg.keys)
	default:
		shape = ""
	}
	lctx, cancel := context.WithTimeout(ctx, 3*c.cfg.ttl)
	defer cancel()
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = lockName(k)
	}
	call := c.since()
	var lease *redlock.Lease
	var err error
	if len(keys) == 1 {
		lease, err = c.locker.Lock(lctx, names[0], c.cfg.ttl)
	} else {
		lease, err = c.locker.LockMulti(lctx, names, c.cfg.ttl)
	}
	if d, ok := lctx.Deadline(); ok && ctx.Err() == nil {
		c.hist.bounded(d, time.Now())
	}
	if err != nil {
		if ctx.Err() == nil {
			c.hist.failed("lock", err)
		}
		return
	}
	records := c.record(lease, keys, call, shape)
	defer func() {
		// The release runs even when the run has ended: keys left behind
		// are the referee's to count, not the workload's to cause.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ttl)
		defer cancel()
		// The client stops relying on the lease when it calls Unlock:
		// another may acquire before this call returns.
		c.hist.released(records, c.since())
		err := lease.Unlock(uctx)
		d, _ := uctx.Deadline()
		c.hist.bounded(d, time.Now())
		if err != nil {
			c.hist.failed("unlock", err)
		}
	}()
	c.work(ctx, lease, keys, records, c.cfg.hold)
}

// doCycle runs the work on key under Locker.Do, for three times the hold
// (longer than the TTL: Do's extensions keep the lease meanwhile). The
// client believes the validity the lease has when it writes (extended),
// and stops relying on the lease when its function returns.
func (c *client) doCycle(ctx, dctx context.Context, key int) {
	call := c.since()
	var records []int
	err := c.locker.Do(dctx, lockName(key), c.cfg.ttl, func(_ context.Context, lease *redlock.Lease) error {
		records = c.record(lease, []int{key}, call, "do")
		c.work(ctx, lease, []int{key}, records, 3*c.cfg.hold)
		c.hist.released(records, c.since())
		return nil
	})
	if d, ok := dctx.Deadline(); ok && ctx.Err() == nil && records == nil {
		c.hist.bounded(d, time.Now()) // Do's wait for the lease, which gave up
	}
	if err != nil && ctx.Err() == nil {
		op := "do"
		if records == nil {
			op = "lock"
		}
		c.hist.failed(op, err)
	}
}

// record adds a lease record for each of the lease's keys.
func (c *client) record(lease *redlock.Lease, keys []int, call time.Duration, shape string) []int {
	records := make([]int, len(keys))
	for i, k := range keys {
		records[i] = c.hist.addLease(leaseRecord{Client: c.id, Key: k, Token: lease.TokenOf(lockName(k)), Call: call, Acquired: c.since(),
			Until: lease.Until().Sub(c.start), Holders: lease.Holders(), Shape: shape})
	}
	return records
}

// work reads each key's counter, waits hold (the work the lock
// protects), perhaps pauses (the nemesis's pause fault), and writes each
// counter back plus one, each access fenced by the key's token.
func (c *client) work(ctx context.Context, lease *redlock.Lease, keys []int, records []int, hold time.Duration) {
	// The resource is never faulted, but its calls are bounded all the same.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	values := make([]int64, len(keys))
	for i, key := range keys {
		read := access{Lease: records[i], Call: c.since()}
		value, err := c.res.of(key).read(rctx, key, lease.TokenOf(lockName(key)))
		read.Return, read.Value = c.since(), value
		read.Accepted = err == nil
		read.Unknown = err != nil && !errors.Is(err, fence.ErrStaleToken)
		c.hist.addAccess(read)
		if err != nil {
			c.hist.failed("read", err)
			return
		}
		values[i] = value
	}
	time.Sleep(hold) // the work the lock protects
	select {
	case f := <-c.pauses:
		began := c.since()
		time.Sleep(f.For)
		c.hist.mu.Lock()
		f.Began, f.Ended = began, c.since()
		c.hist.mu.Unlock()
	default:
	}
	// What the client believes now: a lease under Do has been extended.
	c.hist.extended(records, lease.Until().Sub(c.start))
	// The write's own bound, from now: a pause must not spend it, or the
	// paused write would never be sent and fencing never tested.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer wcancel()
	for i, key := range keys {
		write := access{Lease: records[i], Write: true, Call: c.since(), Value: values[i] + 1}
		err := c.res.of(key).write(wctx, key, values[i]+1, lease.TokenOf(lockName(key)))
		write.Return = c.since()
		write.Accepted = err == nil
		write.Unknown = err != nil && !errors.Is(err, fence.ErrStaleToken)
		c.hist.addAccess(write)
		if err != nil {
			c.hist.failed("write", err)
		}
	}
}
