package wire

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
)

// Multi-key commands (Command.OrderKeys): a multi-key lease's script names
// several lock keys, and the pipeline keeps it ordered against each.

// logScript appends ARGV[1] to the lists at its first ARGV[2] keys (the
// keys it is ordered against) and counts on the others (a lease's
// auxiliary keys), so that each list is the order in which commands on its
// key ran.
var logScript = NewScript("log", "RPUSH, INCR", `
local n = tonumber(ARGV[2])
for i = 1, #KEYS do
	if i <= n then
		redis.call('RPUSH', KEYS[i], ARGV[1])
	else
		redis.call('INCR', KEYS[i])
	end
end
return 1
`)

// logCommand is logScript appending mark on locks, and counting on aux;
// ordered against every lock where there are several, as a multi-key
// lease's command is.
func logCommand(mark string, locks []string, aux ...string) Command {
	return logCommandOf(logScript, mark, locks, aux...)
}

// logCommandOf is logCommand with s, a copy of logScript.
func logCommandOf(s *Script, mark string, locks []string, aux ...string) Command {
	c := ScriptCommand(s, append(slices.Clone(locks), aux...), mark, len(locks))
	if len(locks) > 1 {
		c = c.Across(len(locks))
	}
	return c
}

func TestCommandOrderKeys(t *testing.T) {
	abc := ScriptCommand(logScript, []string{"a", "b", "c"}, "m", 2)
	require.Nil(t, abc.OrderedBy(), "0: Key alone")
	require.Equal(t, []string{"a", "b"}, abc.Across(2).OrderedBy())
	require.Equal(t, []string{"a", "b", "c"}, abc.Across(3).OrderedBy())
	require.Panics(t, func() { abc.Across(4) })
	require.Panics(t, func() { abc.Across(-1) })
}

// Command stays within 128 bytes, where the direct transport's go statement
// copies it without an allocation more (OrderKeys sits in the padding after
// its bools), and job within 160, a malloc size class (see both).
func TestSizesKeepTheirBounds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		size, bound uintptr
	}{
		{"Command", unsafe.Sizeof(Command{}), 128},
		{"job", unsafe.Sizeof(job{}), 160},
	} {
		t.Run(tc.name, func(t *testing.T) { require.LessOrEqual(t, tc.size, tc.bound) })
	}
}

// turnstile is a go-redis hook that stops each call carrying a script
// (a lone command or a pipeline) until the test lets it go, and tells the
// test what arrived: so that the test decides which batch reaches the node
// first. Other calls (a new connection's HELLO) pass.
type turnstile struct {
	arrived chan arrival
	done    chan struct{} // closed when the test ends: every call passes
}

// arrival is a call stopped at the turnstile: close let to let it go.
type arrival struct {
	cmds []redis.Cmder
	let  chan struct{}
}

func (ts *turnstile) pass(cmds []redis.Cmder) {
	if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" }) {
		return
	}
	a := arrival{cmds: cmds, let: make(chan struct{})}
	select {
	case ts.arrived <- a:
	case <-ts.done:
		return
	}
	select {
	case <-a.let:
	case <-ts.done:
	}
}

func (ts *turnstile) DialHook(next redis.DialHook) redis.DialHook { return next }

func (ts *turnstile) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { ts.pass([]redis.Cmder{cmd}); return next(ctx, cmd) }
}

func (ts *turnstile) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { ts.pass(cmds); return next(ctx, cmds) }
}

// A batch in flight holds b. Behind it wait a multi-key command M on a and
// b, then S on a alone. a is free, but S must not overtake M on it: no new
// sender may take S (and kicked starts none), and once b is let go, M runs
// before S. The last row is the negative control: M ordered by its first
// key alone (b) is overtaken on a, which the rows above rule out.
func TestPipelineKeepsAMultiKeyCommandInOrderOnEveryKey(t *testing.T) {
	for _, tc := range []struct {
		name      string
		locks     []string // M's lock keys
		orderKeys int      // M's OrderKeys
		overtaken bool     // S reaches the node before M
	}{
		{"the held key first", []string{"b", "a"}, 2, false},
		{"the held key second", []string{"a", "b"}, 2, false},
		{"ordered by its first key alone", []string{"b", "a"}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := redistest.Miniredis(t)
			ts := &turnstile{arrived: make(chan arrival), done: make(chan struct{})}
			t.Cleanup(func() { close(ts.done) })
			client := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { client.Close() })
			client.AddHook(ts)
			ctx := t.Context()
			// Loaded and learned, so that nothing meets NOSCRIPT and runs
			// again, and no first use loads it through the turnstile.
			require.NoError(t, logScript.TrustFrom(ctx, client))
			p := &pipeline{client: client}
			submit := func(c Command) replies {
				r := make(replies, 1)
				p.Submit(ctx, c, Send{Timeout: time.Minute}, r, 0)
				return r
			}
			senders := func() int {
				p.mu.Lock()
				defer p.mu.Unlock()
				return p.senders
			}
			// await lets every call go until r's reply is in.
			await := func(r replies) {
				t.Helper()
				for {
					select {
					case a := <-ts.arrived:
						close(a.let)
					case rep := <-r:
						require.NoError(t, rep.Cmd.Err())
						return
					}
				}
			}

			x := submit(logCommand("X", []string{"b"}))
			inFlight := <-ts.arrived // sender 1 holds b
			mc := ScriptCommand(logScript, tc.locks, "M", len(tc.locks)).Across(tc.orderKeys)
			mr := submit(mc)
			sr := submit(logCommand("S", []string{"a"}))
			require.Equal(t, 1, senders())

			p.kicked()
			if tc.overtaken {
				require.Equal(t, 2, senders(), "kicked started no sender for S")
				await(sr) // S, taken by the new sender, runs
			} else {
				require.Equal(t, 1, senders(), "kicked started a sender that could take nothing")
				// A sender that asks anyway takes nothing, and ends.
				p.mu.Lock()
				p.senders++
				p.lastID++
				id := p.lastID
				p.mu.Unlock()
				ended := make(chan struct{})
				go func() { p.send(id); close(ended) }()
				select {
				case a := <-ts.arrived:
					close(a.let)
					t.Errorf("a second sender took %v while b was held", a.cmds)
				case <-ended:
				}
			}
			close(inFlight.let)
			for _, r := range []replies{x, mr, sr} {
				if r != sr || !tc.overtaken {
					await(r)
				}
			}

			want := []string{"M", "S"}
			if tc.overtaken {
				want = []string{"S", "M"}
			}
			require.Equal(t, want, client.LRange(ctx, "a", 0, -1).Val(), "a's log")
			require.Equal(t, []string{"X", "M"}, client.LRange(ctx, "b", 0, -1).Val(), "b's log")
		})
	}
}

// tally counts replies in, and keeps their errors.
type tally struct {
	calls tracker
	mu    sync.Mutex
	errs  []error
}

func (r *tally) Receive(_ int, rep Reply) {
	if err := rep.Cmd.Err(); err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}
	r.calls.done()
}

// lastRuns is a key's log with each command at its last run only. A
// command runs again after NOSCRIPT, and so does every later one on its
// keys in the batch, in order (see runAgain): what holds, however commands
// ran twice, is that their last runs are in submission order.
func lastRuns(log []string) []string {
	seen := make(map[string]bool, len(log))
	var runs []string
	for _, mark := range slices.Backward(log) {
		if !seen[mark] {
			seen[mark] = true
			runs = append(runs, mark)
		}
	}
	slices.Reverse(runs)
	return runs
}

// Order per key, for single-key and multi-key commands mixed: random
// schedules of scripts and plain commands over four keys, submitted in a
// known order from one goroutine while batches are held in flight and let
// go at random moments, further senders started (kicked) while they are,
// and the script cache flushed at random moments (NOSCRIPT: commands run
// again). The script's digest is unknown when each schedule starts: its
// first commands go as EVAL, the first Submit loads it in the background
// (held with the batches while they are), the schedule learns it at
// random moments too, and from then on commands go as EVALSHA, so that a
// batch may mix both forms. Each command appends its number to the log of
// every key it is ordered against; in the end each log, at each command's
// last run, is in submission order.
func TestPipelineKeepsOrderPerKeyUnderRandomSchedules(t *testing.T) {
	schedules := 200
	if testing.Short() {
		schedules = 40
	}
	m, g, client, admin := gatedServer(t)
	locks := []string{"a", "b", "c", "d"}
	for seed := range schedules {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 11))
			ctx := t.Context()
			m.FlushAll()
			p := &pipeline{client: client}
			r := &tally{}
			want := map[string][]string{}
			log := NewScript(logScript.Name, logScript.Calls, logScript.Src) // nothing learned yet
			for n := range 20 + rng.IntN(40) {
				mark := strconv.Itoa(n)
				var c Command
				var on []string
				switch rng.IntN(4) {
				case 0: // a plain command, never run again but after another
					on = []string{locks[rng.IntN(len(locks))]}
					c = Command{Key: on[0], Args: []any{"rpush", on[0], mark}}
				case 1:
					on = []string{locks[rng.IntN(len(locks))]}
					c = logCommandOf(log, mark, on)
				default: // a multi-key lease's: two or three locks, in any order
					shuffled := slices.Clone(locks)
					rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
					on = shuffled[:2+rng.IntN(2)]
					if rng.IntN(2) == 0 {
						c = logCommandOf(log, mark, on, "aux")
					} else {
						c = logCommandOf(log, mark, on)
					}
				}
				for _, k := range on {
					want[k] = append(want[k], mark)
				}
				r.calls.add(1)
				p.Submit(ctx, c, Send{Timeout: time.Minute}, r, 0)

				switch rng.IntN(8) {
				case 0:
					g.hold()
				case 1:
					g.let()
				case 2, 3:
					p.kicked() // another sender, if one could take anything
				case 4:
					require.NoError(t, admin.ScriptFlush(ctx).Err())
					if rng.IntN(2) == 0 {
						require.NoError(t, log.TrustFrom(ctx, admin)) // loaded again, and learned if it was not
					}
				}
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond) // let a sender take a batch
				}
			}
			g.let()
			require.NoError(t, r.calls.wait(ctx))
			require.Empty(t, r.errs)
			for _, k := range locks {
				log := admin.LRange(ctx, k, 0, -1).Val()
				require.Equal(t, want[k], lastRuns(log), "%s's log, as run: %v", k, log)
			}
		})
	}
}
