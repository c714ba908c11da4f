package redlock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock/internal/reply"
)

// NodeHealth is one node as this Locker sees it: recent round trips and
// failures, the node guard's quarantine and clock measurements, and the
// node's own settings.
type NodeHealth struct {
	Node int    // index in the nodes passed to New
	Name string // as errors name it

	RTT      time.Duration // recent round trips (moving average); 0 before the first
	Failures int           // votes that failed in the last minute: errors, timeouts, quarantines

	// QuarantineLeft is how long the node guard keeps the node's votes out
	// of the quorum (0: they count), and QuarantineCause why. Each marker
	// this Locker has examined counts (one per hash slot used, on a Redis
	// Cluster node), and so does a clock jump.
	QuarantineLeft  time.Duration
	QuarantineCause string

	// Duplicate is set (errors.Is ErrDuplicateNode, naming both nodes)
	// where the node answers as the same server as another node, whose
	// votes count instead: its own do not. As the node guard decided at
	// its last examination; with Options.NoQuarantine, as the run_ids read
	// now say (INFO server; not for a Redis Cluster node), of which the
	// later node of the pair is named.
	Duplicate error

	// The node's clock against this process's, from the readings that
	// guarded round trips carry (none with Options.NoQuarantine, nor on a
	// Redis Cluster node): the rate in parts per million (positive: it runs
	// fast) with its worst-case error, once ClockMeasured; the forward and
	// backward jumps seen; and the readings taken. ClockReadBy says how the
	// guard reads the clock now: ClockByExpiry, ClockByTime, or "" (not
	// read).
	ClockReadBy     string
	ClockRatePPM    float64
	ClockRateErrPPM float64
	ClockMeasured   bool
	ClockJumps      int
	ClockSamples    int

	// The node's settings, read now (INFO and CONFIG GET, within
	// NodeTimeout, and at least a second): its version, role and connected
	// replicas, and what Durability reads. Err says what could not be read.
	Version    string
	Role       string
	Replicas   int
	Durability NodeDurability
	// MaxmemoryPolicy is the node's eviction policy (INFO memory), and
	// Evicts whether it may evict keys, lock keys among them (maxmemory
	// set, a policy other than noeviction): run lock nodes with
	// noeviction. The node guard watches such a node's evictions.
	MaxmemoryPolicy string
	Evicts          bool
	Err             error
}

// How the node guard reads a node's clock (NodeHealth.ClockReadBy).
const (
	// ClockByExpiry: the guard's marker has an absolute expiry a century
	// or more ahead, and the node's clock is that expiry minus the PTTL
	// that follows each guarded command (in milliseconds): one companion
	// tells that the marker is there and unchanged, and reads the clock by
	// which the node expires keys. For servers that say their uptime and
	// have PEXPIRETIME (Redis 7.0 on, Valkey), when the two agree.
	ClockByExpiry = "marker expiry (PTTL)"
	// ClockByTime: TIME follows each guarded command, with GET of the
	// marker (miniredis, older servers).
	ClockByTime = "TIME"
)

// Health reports every node's health, in the order given to New. It reads
// each node's settings (INFO server and replication, CONFIG GET) with a
// deadline of NodeTimeout, at least a second; the rest is this Locker's own
// record and costs no round trip.
func (l *Locker) Health() []NodeHealth {
	if l == nil {
		return nil
	}
	out := make([]NodeHealth, len(l.nodes))
	runs := make([][]string, len(l.nodes)) // each node's server (see identity.go)
	var wg sync.WaitGroup
	for i, n := range l.nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), max(l.opts.NodeTimeout, time.Second))
			defer cancel()
			out[i], runs[i] = n.health(ctx, l.opts.Clock.Now())
		})
	}
	wg.Wait()
	for i, n := range l.nodes {
		if n.guard == nil {
			out[i].Duplicate = duplicate(l.nodes, runs, i)
		}
	}
	return out
}

// health returns n's health, and the run_id of the server that answered
// its INFO (none for a Redis Cluster node, whose INFO any node answers).
func (n node) health(ctx context.Context, now time.Time) (NodeHealth, []string) {
	h := NodeHealth{Node: n.index, Name: n.name}
	h.RTT, h.Failures = n.stats.recent(now)
	h.QuarantineLeft, h.QuarantineCause = n.quarantine(now)
	if g := n.guard; g != nil {
		h.Duplicate = g.Duplicate()
		if c := g.Clock(); c != nil {
			h.ClockReadBy = ClockByTime
			if g.ReadsClockByExpiry() {
				h.ClockReadBy = ClockByExpiry
			}
			h.ClockRatePPM, h.ClockRateErrPPM, h.ClockMeasured = c.Rate()
			h.ClockJumps, h.ClockSamples = c.Jumps(), c.Readings()
		}
	}
	h.Durability = n.durability(ctx)
	info, err := n.Do(ctx, "INFO", "server").Text()
	var runs []string
	if _, cluster := n.Node.(*redis.ClusterClient); !cluster {
		if run := runID(info, err); run != "" {
			runs = []string{run}
		}
	}
	for _, section := range []string{"replication", "memory"} {
		if err != nil {
			break
		}
		var more string
		if more, err = n.Do(ctx, "INFO", section).Text(); err == nil {
			info += more
		}
	}
	if err != nil {
		h.Err = fmt.Errorf("INFO: %w", reply.Denied("INFO (Health reads server, replication and memory)", err))
		return h, runs
	}
	f := reply.InfoFields(info)
	h.Version, h.Role = f["redis_version"], f["role"]
	if v := f["valkey_version"]; v != "" {
		h.Version = "valkey " + v
	}
	h.Replicas, _ = strconv.Atoi(f["connected_slaves"])
	h.MaxmemoryPolicy = f["maxmemory_policy"]
	h.Evicts = evicts(f["maxmemory"], h.MaxmemoryPolicy)
	return h, runs
}

// nodeStats is one node's recent record, which both transports keep.
type nodeStats struct {
	mu       sync.Mutex
	rtt      time.Duration
	buckets  [failureBuckets]int // failed votes per failureBucket
	newest   time.Time           // when buckets[last] began
	last     int
	recorded bool
}

const (
	failureBuckets = 6
	failureBucket  = 10 * time.Second // six of them: the last minute
)

// record counts one vote: its round trip (0: not timed) and whether it
// failed.
func (s *nodeStats) record(now time.Time, rtt time.Duration, failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rtt > 0 {
		if s.rtt == 0 {
			s.rtt = rtt
		}
		s.rtt += (rtt - s.rtt) / 8
	}
	if !failed {
		return
	}
	s.advance(now)
	s.buckets[s.last]++
}

// trip counts a round trip that carried the node's commands (a pipeline's
// batch: see wire.NewPipeline).
func (s *nodeStats) trip(at time.Time, rtt time.Duration) { s.record(at, rtt, false) }

// advance moves the buckets on to now. s.mu is held.
func (s *nodeStats) advance(now time.Time) {
	if !s.recorded {
		s.newest, s.recorded = now, true
		return
	}
	for i := 0; i < failureBuckets && now.Sub(s.newest) >= failureBucket; i++ {
		s.last = (s.last + 1) % failureBuckets
		s.buckets[s.last] = 0
		s.newest = s.newest.Add(failureBucket)
	}
	if now.Sub(s.newest) >= failureBucket { // idle for longer than the window
		s.newest = now
	}
}

// recent returns the round-trip average and the failures of the last
// minute.
func (s *nodeStats) recent(now time.Time) (time.Duration, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(now)
	n := 0
	for _, b := range s.buckets {
		n += b
	}
	return s.rtt, n
}
