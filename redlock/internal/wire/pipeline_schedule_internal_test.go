package wire

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/quorum"
)

// gate is a go-redis hook that holds the batches a client sends while it is
// closed, so that a schedule can pile commands up behind a batch in flight.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // nil: open
}

func (g *gate) wait() {
	g.mu.Lock()
	c := g.open
	g.mu.Unlock()
	if c != nil {
		<-c
	}
}

func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		g.open = make(chan struct{})
	}
}

func (g *gate) let() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		close(g.open)
		g.open = nil
	}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { g.wait(); return next(ctx, cmd) }
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { g.wait(); return next(ctx, cmds) }
}

// gatedServer is a schedule's node: an in-process server, a client whose
// batches g holds while it is closed, and an admin client that g does not
// hold.
func gatedServer(t *testing.T) (m *miniredis.Miniredis, g *gate, client, admin *redis.Client) {
	m, g = redistest.Miniredis(t), &gate{}
	client = redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	client.AddHook(g)
	admin = redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { admin.Close() })
	return m, g, client, admin
}

// scheduleLease is one lease of a schedule: its value, and its release's
// vote once sent.
type scheduleLease struct {
	key, value string
	released   *quorum.Round[Outcome] // nil: not yet
}

// The pipeline's invariant (see pipeline): once a lease's release ran on
// the node, or was taken as done there, no command of that lease sets its
// key there again. Random schedules over one node: acquisitions, healing
// extensions and releases of leases on two keys, batches held in flight so
// that commands pile up (and the queue fills, so that releases withdraw),
// the script cache flushed at random moments with a random part of it
// loaded again (NOSCRIPT on some commands of a batch and not others), the
// scripts' digests learned at random moments (EVAL before, EVALSHA
// after, mixed in a batch). At the
// end every lease is released; a release that was accepted (it reported
// done or missing) (done, missing, or another value holds the key) must leave its value nowhere. Before the invariant was
// enforced, a release that withdrew its SET left a queued healing extension
// behind it, and a batch [SET, extend → NOSCRIPT, release → 1] ran the
// extension again after the release: both left the key for its TTL.
func TestPipelineReleaseIsLastUnderRandomSchedules(t *testing.T) {
	schedules := 150
	if testing.Short() {
		schedules = 30
	}
	m, g, client, admin := gatedServer(t)
	for seed := range schedules {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			p := &pipeline{client: client}
			releaseSchedule{m: m, g: g, admin: admin, keys: 2, stream: 7}.run(t, p, seed, nil)
		})
	}
}

// releaseSchedule is one server (m, gated by g, flushed through admin) on
// which run plays random schedules: acquisitions, extensions and releases
// on keys keys, the gate held and let go, the queue filled, the script
// cache flushed, from a seed on PCG stream stream.
type releaseSchedule struct {
	m      *miniredis.Miniredis
	g      *gate
	admin  *redis.Client
	keys   int
	stream uint64
}

// run plays the schedule of seed through p, each call's receiver wrapped
// by wrap (if set), and checks what TestPipelineReleaseIsLastUnderRandomSchedules
// states: every call answered, and a release that was accepted leaves its
// value nowhere.
func (rs releaseSchedule) run(t *testing.T, p *pipeline, seed int, wrap func(to Receiver, label string) Receiver) {
	ctx := t.Context()
	// Copies whose digests the schedule learns at random moments (or
	// never): until then they go as EVAL, after as EVALSHA, which meets
	// NOSCRIPT once the cache is flushed.
	extendScript, releaseScript := loadScript("extend", extendScript.Calls), loadScript("release", releaseScript.Calls)
	scripts := []*Script{extendScript, releaseScript}
	rng := rand.New(rand.NewPCG(uint64(seed), rs.stream))
	for _, s := range scripts {
		if rng.IntN(2) == 0 {
			require.NoError(t, s.TrustFrom(ctx, rs.admin))
		}
	}
	rs.m.FlushAll()
	calls := &tracker{}
	submit := func(c Command, read reader) (*quorum.Round[Outcome], bool) {
		round := quorum.Begin[Outcome](1)
		calls.add(1)
		wire := c.Wire()
		var to Receiver = &roundReceiver{round: round, read: read, calls: calls}
		if wrap != nil {
			to = wrap(to, fmt.Sprint(wire))
		}
		j := job{cmd: redis.NewCmd(context.Background(), wire...), key: c.Key, lease: c.Lease, role: c.Role, timeout: time.Minute, src: c.source(), to: to}
		if c.ReadsRaw() {
			j.raw = redis.NewRawCmd(context.Background(), wire...)
		}
		if !p.submit(j) {
			to.Receive(0, failed(context.Background(), ErrNodeBusy))
			return round, false
		}
		return round, true
	}
	var leases []*scheduleLease
	var extensions []*quorum.Round[Outcome]
	release := func(l *scheduleLease) {
		c := ScriptCommand(releaseScript, []string{l.key}, l.value).Of(l.value, RoleReleases)
		l.released, _ = submit(c, readScript)
	}
	for range 12 + rng.IntN(20) {
		switch op := rng.IntN(10); {
		case op < 3 || len(leases) == 0:
			l := &scheduleLease{key: fmt.Sprintf("k%d", rng.IntN(rs.keys)), value: fmt.Sprintf("v%d-%d", seed, len(leases))}
			leases = append(leases, l)
			submit(acquireCommand(l.key, l.value, 60000), readAcquire(l.value))
		case op < 5:
			if l := leases[rng.IntN(len(leases))]; l.released == nil {
				c := ScriptCommand(extendScript, []string{l.key}, l.value, int64(60000), "1", 1).Of(l.value, RoleExtends) // value, ms, heal, keys
				if round, ok := submit(c, readScript); ok {
					extensions = append(extensions, round)
				}
			}
		case op < 7:
			if l := leases[rng.IntN(len(leases))]; l.released == nil {
				release(l)
			}
		case op == 7:
			rs.g.hold()
			if rng.IntN(3) == 0 { // and fill the queue, so that releases withdraw
				for {
					if _, ok := submit(Command{Key: "filler", Args: []any{"PING"}}, readScript); !ok {
						break
					}
				}
			}
		case op == 8:
			rs.g.let()
		case op == 9:
			require.NoError(t, rs.admin.ScriptFlush(ctx).Err())
			for _, s := range scripts {
				if rng.IntN(2) == 0 {
					require.NoError(t, s.TrustFrom(ctx, rs.admin)) // loaded again, and learned if it was not
				}
			}
		}
		if rng.IntN(4) == 0 {
			time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond) // let a sender take a batch
		}
	}
	for _, l := range leases {
		if l.released == nil {
			release(l)
		}
	}
	rs.g.let()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, calls.wait(wctx), "a call was never answered")
	// Every extension ran as the coordinator's does (the healing this
	// schedule is about needs it to run): none met the script's own error.
	for _, round := range extensions {
		if _, err := round.Result(0); err != nil {
			var reply redis.Error
			require.False(t, errors.As(err, &reply), "an extension was answered with an error: %v", err)
		}
	}
	for _, l := range leases {
		o, err := l.released.Result(0)
		if err != nil {
			continue // refused (a full queue, its SET sent): the key may stay for its TTL
		}
		require.Contains(t, []Outcome{Granted, Missing, Taken}, o)
		got, _ := rs.m.Get(l.key)
		require.NotEqual(t, l.value, got, "%s holds %s after its release reported %v", l.key, l.value, o)
	}
}
