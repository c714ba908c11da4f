package drift_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redlock/redlock/drift"
)

// node is a synthetic node clock: it starts at wall, runs at 1+rate of the
// client's monotonic clock, and has stepped by the sum of steps so far.
type node struct {
	wall  time.Time
	rate  float64
	steps time.Duration
}

func (n *node) at(since time.Duration) time.Time {
	return n.wall.Add(since + time.Duration(float64(since)*n.rate) + n.steps)
}

// sampler produces readings of a node: requests every gap, round trips
// drawn from [rttMin, rttMax], the node reading its clock at a fraction of
// the round trip drawn from [readMin, readMax] (asymmetric when not 0..1).
type sampler struct {
	start            time.Time // monotonic
	now              time.Duration
	node             *node
	gap              time.Duration
	rttMin, rttMax   time.Duration
	readMin, readMax float64
	rng              *rand.Rand
}

func newSampler(n *node, gap, rttMin, rttMax time.Duration) *sampler {
	return &sampler{start: time.Now(), node: n, gap: gap, rttMin: rttMin, rttMax: rttMax, readMin: 0, readMax: 1, rng: rand.New(rand.NewPCG(1, 2))}
}

func (s *sampler) next() drift.Reading {
	s.now += s.gap
	rtt := s.rttMin
	if s.rttMax > s.rttMin {
		rtt += time.Duration(s.rng.Int64N(int64(s.rttMax - s.rttMin)))
	}
	read := s.readMin + s.rng.Float64()*(s.readMax-s.readMin)
	sent := s.now
	s.now += rtt
	return drift.Reading{
		Sent:     s.start.Add(sent),
		Received: s.start.Add(s.now),
		Node:     s.node.at(sent + time.Duration(float64(rtt)*read)),
	}
}

// observe feeds n readings and returns the jumps they revealed.
func observe(e *drift.Estimator, s *sampler, n int) []drift.Jump {
	var jumps []drift.Jump
	for range n {
		if j, ok := e.Observe(s.next()); ok {
			jumps = append(jumps, j)
		}
	}
	return jumps
}

func TestEstimatorSteadyClocks(t *testing.T) {
	for _, tc := range []struct {
		name           string
		offset         time.Duration
		rate           float64
		gap            time.Duration
		rttMin, rttMax time.Duration
		readMin        float64
		readMax        float64
	}{
		{"same clock", 0, 0, 10 * time.Millisecond, 200 * time.Microsecond, 400 * time.Microsecond, 0, 1},
		{"constant offset of five minutes", 5 * time.Minute, 0, 10 * time.Millisecond, 200 * time.Microsecond, 400 * time.Microsecond, 0, 1},
		{"behind by an hour", -time.Hour, 0, 10 * time.Millisecond, 200 * time.Microsecond, 400 * time.Microsecond, 0, 1},
		{"noisy round trips", 0, 0, 5 * time.Millisecond, 100 * time.Microsecond, 5 * time.Millisecond, 0, 1},
		{"asymmetric: read at the start", 0, 0, 5 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 0, 0.05},
		{"asymmetric: read at the end", 0, 0, 5 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 0.95, 1},
		{"rare readings", 0, 0, 30 * time.Second, time.Millisecond, 2 * time.Millisecond, 0, 1},
		{"slow within the bound (-0.5%)", 0, -0.005, 10 * time.Millisecond, 200 * time.Microsecond, 400 * time.Microsecond, 0, 1},
		{"fast within the bound (+0.5%)", 0, 0.005, 10 * time.Millisecond, 200 * time.Microsecond, 400 * time.Microsecond, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &node{wall: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(tc.offset), rate: tc.rate}
			s := newSampler(n, tc.gap, tc.rttMin, tc.rttMax)
			s.readMin, s.readMax = tc.readMin, tc.readMax
			e := drift.NewEstimator(drift.Default)
			if jumps := observe(e, s, 500); len(jumps) > 0 {
				t.Fatalf("%d jumps on a steady clock, the first %+v", len(jumps), jumps[0])
			}
			ppm, errPPM, ok := e.Rate()
			if !ok {
				t.Fatalf("rate not measured after 500 readings (%.0f ± %.0f ppm)", ppm, errPPM)
			}
			if want := tc.rate * 1e6; math.Abs(ppm-want) > errPPM {
				t.Errorf("rate %.1f ± %.1f ppm, want %.1f", ppm, errPPM, want)
			}
			if x := e.Excess(); x != 0 {
				t.Errorf("Excess %v for a clock within the bound", x)
			}
			if e.Readings() != 500 || e.Jumps() != 0 {
				t.Errorf("Readings %d, Jumps %d; want 500, 0", e.Readings(), e.Jumps())
			}
		})
	}
}

// A node 5% fast, and one 3% slow: both outside the 1% bound, measured, not
// mistaken for jumps; only the fast one has an Excess.
func TestEstimatorRateOutsideTheBound(t *testing.T) {
	for _, rate := range []float64{0.05, -0.03} {
		n := &node{wall: time.Unix(1e9, 0), rate: rate}
		e := drift.NewEstimator(drift.Default)
		if jumps := observe(e, newSampler(n, 5*time.Millisecond, 200*time.Microsecond, 600*time.Microsecond), 300); len(jumps) > 0 {
			t.Fatalf("rate %v: %d jumps, the first %+v", rate, len(jumps), jumps[0])
		}
		ppm, errPPM, ok := e.Rate()
		if !ok || math.Abs(ppm-rate*1e6) > errPPM {
			t.Fatalf("rate %v: measured %.0f ± %.0f ppm (ok %v)", rate, ppm, errPPM, ok)
		}
		excess := e.Excess()
		if rate < 0 && excess != 0 {
			t.Errorf("rate %v: Excess %v for a slow clock", rate, excess)
		}
		if rate > 0 && (excess <= 0 || excess > rate-drift.Default.Factor) {
			t.Errorf("rate %v: Excess %v, want in (0, %v]", rate, excess, rate-drift.Default.Factor)
		}
	}
}

func TestEstimatorJumps(t *testing.T) {
	for _, step := range []time.Duration{50 * time.Millisecond, -50 * time.Millisecond, 5 * time.Second, -time.Hour} {
		n := &node{wall: time.Unix(1e9, 0)}
		s := newSampler(n, 10*time.Millisecond, 200*time.Microsecond, 400*time.Microsecond)
		e := drift.NewEstimator(drift.Default)
		if jumps := observe(e, s, 200); len(jumps) > 0 {
			t.Fatalf("jumps before the step: %+v", jumps)
		}
		n.steps += step
		jumps := observe(e, s, 200)
		if len(jumps) != 1 {
			t.Fatalf("step %v: %d jumps (%+v), want 1", step, len(jumps), jumps)
		}
		// At least the step less what the bound allows over one gap and
		// two round trips; never more than the step.
		got, slack := jumps[0].Size, drift.Default.Of(11*time.Millisecond)+time.Millisecond
		if (step > 0 && (got <= 0 || got > step || got < step-slack)) || (step < 0 && (got >= 0 || got < step || got > step+slack)) {
			t.Errorf("step %v: jump of %v", step, got)
		}
		if e.Jumps() != 1 {
			t.Errorf("Jumps() = %d", e.Jumps())
		}
		// The rate is measured afresh after the step, and is right.
		if ppm, errPPM, ok := e.Rate(); !ok || math.Abs(ppm) > errPPM {
			t.Errorf("step %v: rate after it %.0f ± %.0f ppm (ok %v)", step, ppm, errPPM, ok)
		}
	}
}

// steady returns a node read 100 times, 10 ms apart, with sub-millisecond
// round trips, and the Estimator that read it.
func steady() (*node, *sampler, *drift.Estimator) {
	n := &node{wall: time.Unix(1e9, 0)}
	s := newSampler(n, 10*time.Millisecond, 200*time.Microsecond, 400*time.Microsecond)
	e := drift.NewEstimator(drift.Default)
	observe(e, s, 100)
	return n, s, e
}

// A step smaller than the bound allows between two readings is not a jump:
// the Fixed part of the bound (2 ms by default) absorbs it.
func TestEstimatorStepWithinTheBound(t *testing.T) {
	n, s, e := steady()
	n.steps += time.Millisecond
	if jumps := observe(e, s, 100); len(jumps) > 0 {
		t.Fatalf("a 1 ms step counted as a jump: %+v", jumps)
	}
}

// A node frozen for two seconds between request and reply kept time: its
// reply is late, not its clock.
func TestEstimatorFrozenNode(t *testing.T) {
	n, s, e := steady()
	sent := s.now + s.gap
	s.now = sent + 2*time.Second
	frozen := drift.Reading{Sent: s.start.Add(sent), Received: s.start.Add(s.now), Node: n.at(s.now - 100*time.Microsecond)}
	if j, ok := e.Observe(frozen); ok {
		t.Fatalf("the frozen node's reply counted as a jump: %+v", j)
	}
	if jumps := observe(e, s, 100); len(jumps) > 0 {
		t.Fatalf("jumps after the thaw: %+v", jumps)
	}
}

// Concurrent calls return out of order: readings whose round trips overlap
// and arrive shuffled raise no alarm.
func TestEstimatorOutOfOrder(t *testing.T) {
	n := &node{wall: time.Unix(1e9, 0)}
	s := newSampler(n, 100*time.Microsecond, 200*time.Microsecond, 2*time.Millisecond)
	e := drift.NewEstimator(drift.Default)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		batch := make([]drift.Reading, 8)
		for i := range batch {
			batch[i] = s.next()
			s.now -= 150 * time.Microsecond // the next request leaves before this reply
		}
		rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		for _, r := range batch {
			if j, ok := e.Observe(r); ok {
				t.Fatalf("out-of-order readings counted as a jump: %+v", j)
			}
		}
	}
}

func TestEstimatorIgnoresBackwardRoundTrips(t *testing.T) {
	e := drift.NewEstimator(drift.Default)
	now := time.Now()
	e.Observe(drift.Reading{Sent: now, Received: now.Add(-time.Millisecond), Node: time.Unix(0, 0)})
	if e.Readings() != 0 {
		t.Fatalf("a reading received before it was sent was kept")
	}
	if _, _, ok := e.Rate(); ok {
		t.Fatal("a rate with no readings")
	}
}

// Observe runs on every reply of every node: it allocates nothing.
func TestEstimatorObserveAllocatesNothing(t *testing.T) {
	n := &node{wall: time.Unix(1e9, 0)}
	s := newSampler(n, 30*time.Millisecond, 200*time.Microsecond, 400*time.Microsecond)
	e := drift.NewEstimator(drift.Default)
	readings := make([]drift.Reading, 200)
	for i := range readings {
		readings[i] = s.next()
	}
	i := 0
	if allocs := testing.AllocsPerRun(len(readings)-1, func() { e.Observe(readings[i]); i++ }); allocs != 0 {
		t.Fatalf("Observe allocates %v times per reading", allocs)
	}
}

// millis truncates r's Node to the millisecond, as a clock read from a key's
// absolute expiry minus its PTTL is, and says so in its Resolution when res.
func millis(r drift.Reading, res bool) drift.Reading {
	r.Node = r.Node.Truncate(time.Millisecond)
	if res {
		r.Resolution = time.Millisecond
	}
	return r
}

// A clock read in whole milliseconds, said to be so, raises no alarm and
// still shows its rate and its steps. The negative control: the same
// readings under a bound with no fixed part, not said to be coarse, show
// the truncation as jumps.
func TestEstimatorMillisecondReadings(t *testing.T) {
	tight := drift.Bound{Factor: 0.01}
	for _, declared := range []bool{true, false} {
		n := &node{wall: time.Unix(1e9, 0).Add(321 * time.Microsecond), rate: 0.05}
		s := newSampler(n, 3*time.Millisecond, 100*time.Microsecond, 300*time.Microsecond)
		e := drift.NewEstimator(tight)
		jumps := 0
		for range 3000 {
			if _, ok := e.Observe(millis(s.next(), declared)); ok {
				jumps++
			}
		}
		if !declared {
			if jumps == 0 {
				t.Fatal("the negative control: truncated readings not declared coarse raised no alarm")
			}
			continue
		}
		if jumps > 0 {
			t.Fatalf("%d jumps from millisecond readings of a steady clock", jumps)
		}
		if ppm, errPPM, ok := e.Rate(); !ok || math.Abs(ppm-50000) > errPPM {
			t.Errorf("rate %.0f ± %.0f ppm (ok %v), want 50000", ppm, errPPM, ok)
		}
		n.steps += 10 * time.Millisecond
		if j, ok := e.Observe(millis(s.next(), true)); !ok || j.Size <= 0 || j.Size > 10*time.Millisecond {
			t.Errorf("a 10 ms forward step read in milliseconds: %+v, %v", j, ok)
		}
	}
}

// ObserveIfFits counts a reading that fits, as Observe does, and leaves the
// Estimator as it was for one that does not; Observe counts that one as the
// Jump it is.
func TestEstimatorObserveIfFits(t *testing.T) {
	n, s, e := steady()
	if !e.ObserveIfFits(s.next()) {
		t.Fatal("a steady reading does not fit")
	}
	before := e.Readings()
	n.steps += time.Hour
	off := s.next()
	if e.ObserveIfFits(off) {
		t.Fatal("an hour's step fits")
	}
	if e.Readings() != before || e.Jumps() != 0 {
		t.Fatalf("a reading that did not fit was recorded: %d readings (had %d), %d jumps", e.Readings(), before, e.Jumps())
	}
	if j, ok := e.Observe(off); !ok || j.Size < 59*time.Minute {
		t.Fatalf("Observe of the reading that did not fit: %+v, %v", j, ok)
	}
	if e.ObserveIfFits(drift.Reading{Sent: off.Received, Received: off.Sent, Node: off.Node}) {
		t.Fatal("a reading received before it was sent fits")
	}
}
