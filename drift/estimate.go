package drift

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// A Reading is one read of a node's clock (Redis TIME) as seen from this
// process: Sent and Received are this process's clock just before the
// request and just after the reply, with their monotonic readings (pass
// time.Now() values, never times rebuilt from numbers); Node is the time the
// node replied. The node read its clock somewhere between Sent and
// Received, and nothing tells where, so every bound below allows the whole
// round trip, in either direction.
//
// Resolution is how far Node may be from the node's clock, either way, for
// a reading coarser than TIME's microsecond: a clock read in milliseconds
// (a key's absolute expiry minus its PTTL) has a Resolution of a
// millisecond. Every bound below widens by it.
type Reading struct {
	Sent, Received time.Time
	Node           time.Time
	Resolution     time.Duration
}

// A Jump is a step of a node's clock that neither its measured rate nor the
// round trips and the drift bound can explain. Size is how far the clock
// stepped at least: positive forward (keys on that node expire early),
// negative backward (they expire late). At is the Received of the reading
// that revealed it.
type Jump struct {
	Size time.Duration
	At   time.Time
}

// Estimator measures one node's clock against this process's from the
// readings it is given: its rate (how much faster or slower it runs, in
// parts per million) and its jumps. It does no I/O and reads no clock.
// It is safe for concurrent use; readings may arrive slightly out of order,
// as concurrent calls to one node return.
//
// Why: Redis expires keys by its own wall clock. A node whose clock jumps
// forward drops keys early, and one that runs fast drops them early by a
// growing amount; Redlock's validity allows only the drift Bound for both.
// An Estimator lets a client see either instead of assuming neither.
//
// What it cannot see: a jump between two readings smaller than what the
// round trips and the Bound allow over the time between them, so a node
// read rarely shows only large jumps; and nothing before its first reading.
type Estimator struct {
	mu     sync.Mutex
	bound  Bound
	origin time.Time         // the first reading's Received: x = 0
	wall   time.Time         // origin without its monotonic reading: y's zero
	last   point             // the reading with the latest Received (total > 0)
	window [windowSize]point // one reading per spacing: the one with the shortest round trip
	n      int               // readings in window
	next   int               // where the next reading goes in window
	bucket point             // the best reading of the spacing in progress (total > 0)
	sums   sums              // of window, kept as it changes
	total  int               // readings since the start
	jumps  int
	rate   rateFit

	// Excess and Jumps as last set, read without the lock: a guarded
	// Locker reads them on every acquisition, while replies feed readings.
	excess    atomic.Uint64 // math.Float64bits of excessLocked()
	jumpsSeen atomic.Int64
}

// The rate is fitted to windowSize readings, one per spacing of this
// process's time: the one with the shortest round trip, whose offset is
// known best. Spacing them keeps the window's span (and so the rate's
// precision) the same however often the node is read: 64 of them span 6.4 s
// or more, which puts a 1 ms round trip's error on the rate under 160 ppm.
const (
	windowSize = 64
	spacing    = 0.1 // seconds
)

// point is a reading reduced to numbers relative to the Estimator's origin:
// x is this process's time at the round trip's midpoint, y the node's
// clock minus x (its offset), half the round trip's uncertainty.
type point struct {
	x, y, half float64 // seconds
	recv       time.Time
	node       time.Time
	sent       time.Time
	res        time.Duration // the reading's Resolution
}

// rateFit is the window's least-squares line y = a + b·x: b is the rate.
type rateFit struct {
	b, err float64 // slope, and its worst-case error from the round trips
	ok     bool
}

// NewEstimator returns an Estimator that tolerates the drift Bound b: a
// step is a Jump only when it exceeds b over the time between two readings,
// on top of their round trips.
func NewEstimator(b Bound) *Estimator {
	return &Estimator{bound: b}
}

// Observe adds a reading. It reports a Jump when the node's clock moved,
// since the previous reading, further than its measured rate (0 until
// measured), the round trips and the Bound allow. After a jump the rate is
// measured afresh from the readings that follow it.
//
// A reading whose Received is before its Sent is ignored.
func (e *Estimator) Observe(r Reading) (Jump, bool) {
	if r.Received.Before(r.Sent) {
		return Jump{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.observe(r)
}

// ObserveIfFits adds r only when it fits the node's clock so far, that is
// when Observe would report no Jump, and reports whether it did. A caller
// whose Node comes from something that may change under it (a key's
// absolute expiry, which a rewrite of the key moves) counts only the
// readings that fit, and looks closer at one that does not (a new key, or a
// jump) before it believes it.
func (e *Estimator) ObserveIfFits(r Reading) bool {
	if r.Received.Before(r.Sent) {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.total == 0 {
		e.observe(r)
		return true
	}
	p := e.point(r)
	if _, jumped := e.step(e.last, p); jumped {
		return false
	}
	e.add(p, false)
	return true
}

// observe adds r, and reports the Jump it reveals.
func (e *Estimator) observe(r Reading) (Jump, bool) {
	if e.total == 0 {
		e.origin, e.wall = r.Received, r.Received.Round(0)
	}
	p := e.point(r)
	var jump Jump
	jumped := false
	if e.total > 0 {
		jump, jumped = e.step(e.last, p)
	}
	e.add(p, jumped)
	return jump, jumped
}

// add records p, a reading that jumped (or not) from the last one: a jump
// starts the rate afresh.
func (e *Estimator) add(p point, jumped bool) {
	e.total++
	if jumped {
		e.jumps++
		e.n, e.next, e.sums, e.rate = 0, 0, sums{}, rateFit{}
	}
	switch {
	case e.total == 1 || jumped:
		e.bucket = p
	case p.x-e.bucket.x >= spacing:
		e.window[e.next] = e.bucket
		e.next = (e.next + 1) % windowSize
		e.n = min(e.n+1, windowSize)
		e.sums = sumsOf(e.window[:e.n])
		e.bucket = p
	case p.half < e.bucket.half:
		e.bucket = p
	}
	e.fit()
	e.excess.Store(math.Float64bits(e.excessLocked()))
	e.jumpsSeen.Store(int64(e.jumps))
	if e.total == 1 || !p.recv.Before(e.last.recv) {
		e.last = p
	}
}

// point reduces r to numbers relative to the Estimator's origin, which
// must be set.
func (e *Estimator) point(r Reading) point {
	res := max(r.Resolution, 0)
	p := point{
		x:    (r.Sent.Sub(e.origin) + r.Received.Sub(e.origin)).Seconds() / 2,
		half: r.Received.Sub(r.Sent).Seconds()/2 + res.Seconds(),
		recv: r.Received, node: r.Node, sent: r.Sent, res: res,
	}
	p.y = r.Node.Sub(e.wall).Seconds() - p.x // wall minus monotonic: only differences matter
	return p
}

// step reports whether the node's clock moved from prev to cur further than
// allowed. The node read its clock at some instant of each round trip, so
// the time that passed here between its two readings lies in
// [cur.sent-prev.recv, cur.recv-prev.sent]; the node's clock may run at the
// measured rate, plus or minus the Bound over that time; and each reading
// may be off by its Resolution.
func (e *Estimator) step(prev, cur point) (Jump, bool) {
	shortest := cur.sent.Sub(prev.recv)
	longest := cur.recv.Sub(prev.sent)
	moved := cur.node.Sub(prev.node)
	rate := 0.0
	if e.rate.ok {
		rate = e.rate.b
	}
	allowance := e.bound.Of(max(longest, -shortest, 0)) + prev.res + cur.res
	lo := scale(shortest, rate) - allowance
	hi := scale(longest, rate) + allowance
	switch {
	case moved > hi:
		return Jump{Size: moved - hi, At: cur.recv}, true
	case moved < lo:
		return Jump{Size: moved - lo, At: cur.recv}, true
	}
	return Jump{}, false
}

// sums are a window's least-squares sums, with x taken from the window's
// earliest reading (x0): sums of squares of hours would lose the
// milliseconds.
type sums struct {
	n                float64
	x0, minX, maxX   float64
	worst            float64 // the largest half round trip
	sx, sy, sxx, sxy float64
}

func sumsOf(points []point) sums {
	if len(points) == 0 {
		return sums{}
	}
	s := sums{x0: math.Inf(1), maxX: math.Inf(-1)}
	for _, p := range points {
		s.x0, s.maxX = min(s.x0, p.x), max(s.maxX, p.x)
		s.worst = max(s.worst, p.half)
	}
	s.minX = s.x0
	for _, p := range points {
		s.add(p)
	}
	return s
}

func (s *sums) add(p point) {
	x := p.x - s.x0
	s.n++
	s.sx += x
	s.sy += p.y
	s.sxx += x * x
	s.sxy += x * p.y
}

// fit refits the rate to the window and the spacing in progress (O(1): the
// window's sums change only once per spacing). The worst-case error of the
// slope is what the round trips allow at the two ends over the span.
func (e *Estimator) fit() {
	s := e.sums
	b := e.bucket
	if s.n == 0 {
		s = sums{x0: b.x, minX: b.x, maxX: b.x}
	}
	s.add(b)
	s.minX, s.maxX, s.worst = min(s.minX, b.x), max(s.maxX, b.x), max(s.worst, b.half)
	den := s.n*s.sxx - s.sx*s.sx
	span := s.maxX - s.minX
	if s.n < 2 || den <= 0 || span <= 0 {
		e.rate = rateFit{}
		return
	}
	slope := (s.n*s.sxy - s.sx*s.sy) / den
	errB := 2 * s.worst / span
	// Known once the error is under half the Bound's factor: then a rate
	// outside the Bound is told apart from round-trip noise.
	e.rate = rateFit{b: slope, err: errB, ok: errB <= e.bound.Factor/2}
}

// Rate returns how much faster the node's clock runs than this process's,
// in parts per million (negative: slower), with the worst-case error of
// that figure, and whether it is measured yet: enough readings over a long
// enough span that the error is under half the Bound's factor.
func (e *Estimator) Rate() (ppm, errPPM float64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rate.b * 1e6, e.rate.err * 1e6, e.rate.ok
}

// Excess returns how much faster than the Bound allows the node's clock
// is measured to run: the rate minus its error minus the Bound's factor,
// or 0 when it is within the Bound or not measured. A lease granted by the
// node expires there that much early, as a fraction of its TTL, beyond
// what the Bound already set aside.
func (e *Estimator) Excess() float64 { return math.Float64frombits(e.excess.Load()) }

// excessLocked is Excess from the fit; e.mu held.
func (e *Estimator) excessLocked() float64 {
	if !e.rate.ok {
		return 0
	}
	return max(0, e.rate.b-e.rate.err-e.bound.Factor)
}

// Readings returns how many readings were observed, and Jumps how many
// jumps they revealed.
func (e *Estimator) Readings() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.total
}

// Jumps returns how many jumps the readings revealed.
func (e *Estimator) Jumps() int { return int(e.jumpsSeen.Load()) }

// scale returns d·(1+rate).
func scale(d time.Duration, rate float64) time.Duration {
	return d + time.Duration(float64(d)*rate)
}
