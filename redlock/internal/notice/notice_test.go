package notice_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/faultnet"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock/internal/notice"
)

// releaseLua is the coordinator's release script (redlock/scripts).
var releaseLua = func() string {
	b, err := os.ReadFile("../../scripts/release.lua")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// heard collects the keys a Hub delivers, the turns, and which were
// deliveries again.
type heard struct {
	mu    sync.Mutex
	keys  []string
	turns []notice.Turn
	again []bool
}

func (h *heard) deliver(key string, turn notice.Turn, again bool) {
	h.mu.Lock()
	h.keys = append(h.keys, key)
	h.turns = append(h.turns, turn)
	h.again = append(h.again, again)
	h.mu.Unlock()
}

func (h *heard) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.keys)
}

// release runs the release script for key and value on c, as a lease's
// Unlock does: value is set first, so that the script deletes it and
// publishes.
func release(t *testing.T, c *redis.Client, key, value string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, key, value, time.Minute).Err())
	n, err := unlock(ctx, c, key, value, "").Int()
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// unlock runs the release script as the coordinator's Unlock sends it
// (redlock's unlockCommand), for the Locker id (named next in the line,
// unless ""): the key's line in KEYS[2] and its release channel in
// ARGV[4], both built in Go; a plain release for a key that cannot carry
// a hash tag.
func unlock(ctx context.Context, c *redis.Client, key, value, id string) *redis.Cmd {
	line, ok := notice.Line(key)
	channel, _ := notice.Channel(key)
	if !ok {
		return c.Eval(ctx, releaseLua, []string{key}, value)
	}
	return c.Eval(ctx, releaseLua, []string{key, line}, value, "notify", id, channel)
}

func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// The release script names the channel as Channel does, for every shape of
// key: plain, tagged, with an empty tag, and with '}' but no tag (none).
func TestScriptPublishesOnTheKeysChannel(t *testing.T) {
	m := redistest.Miniredis(t)
	c := client(t, m.Addr())
	ctx := context.Background()
	for _, key := range []string{"orders:42", "{user:7}:cart", "a{}b", "x}y", "{}"} {
		t.Run(key, func(t *testing.T) {
			want, ok := notice.Channel(key)
			ps := c.PSubscribe(ctx, "*")
			defer ps.Close()
			_, err := ps.ReceiveTimeout(ctx, time.Second) // the confirmation
			require.NoError(t, err)
			release(t, c, key, "v1")
			msg, err := ps.ReceiveTimeout(ctx, 300*time.Millisecond)
			if !ok {
				require.Error(t, err, "a key with no release channel publishes nothing")
				return
			}
			require.NoError(t, err)
			m, isMsg := msg.(*redis.Message)
			require.True(t, isMsg, "%#v", msg)
			assert.Equal(t, want, m.Channel)
			assert.Equal(t, "v1", m.Payload, "the released value")
		})
	}
}

// A release is delivered once its notices came from a majority of the
// nodes (the key is then free on a majority), and again, once, when the
// last subscribed node's notice comes (an attempt the first woke may have
// found it still held there); an expected value (the Locker's own
// release) and an empty probe are not delivered; the last Stop closes the
// connection.
func TestHubDeliversEachReleaseAtAMajorityAndWhenComplete(t *testing.T) {
	nodes := []*miniredis.Miniredis{redistest.Miniredis(t), redistest.Miniredis(t), redistest.Miniredis(t)}
	var clients []*redis.Client
	var sources []notice.Source
	for _, m := range nodes {
		c := client(t, m.Addr())
		clients = append(clients, c)
		sources = append(sources, notice.Subscribable(c))
	}
	var got heard
	h := notice.New(sources, got.deliver, notice.Options{Timeout: time.Second, Majority: 2})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	l := h.Listen("k")
	require.NotNil(t, l)
	second := h.Listen("k") // another waiter: the same subscription
	require.Equal(t, 3, l.Ready(ctx, 3, 5*time.Second), "every node confirmed")
	assert.Equal(t, 3, h.Connections(), "one connection per node")

	release(t, clients[0], "k", "v1") // one release, reaching the nodes one by one
	time.Sleep(100 * time.Millisecond)
	assert.Zero(t, got.count(), "one node of three has released: not yet")
	release(t, clients[1], "k", "v1")
	require.Eventually(t, func() bool { return got.count() == 1 }, 5*time.Second, time.Millisecond, "a majority has")
	release(t, clients[2], "k", "v1")
	require.Eventually(t, func() bool { return got.count() == 2 }, 5*time.Second, time.Millisecond, "every node has")
	h.Expect("k", "v2")
	for _, c := range clients {
		release(t, c, "k", "v2")                                          // the Locker's own
		require.NoError(t, c.Publish(ctx, "{k}"+notice.Suffix, "").Err()) // a probe
	}
	release(t, clients[1], "k", "v3")
	release(t, clients[2], "k", "v3")
	require.Eventually(t, func() bool { return got.count() == 3 }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, []string{"k", "k", "k"}, got.keys, "v1 twice, v2 never, v3 once")
	assert.Equal(t, []bool{false, true, false}, got.again, "v1's second delivery, when every node had released, is again")
	release(t, clients[0], "k", "v3")
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, 4, got.count(), "v3's last node: again, once")
	release(t, clients[0], "k", "v3")
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, 4, got.count(), "a notice past every node's is not delivered")

	l.Stop()
	l.Stop() // twice is once
	assert.Equal(t, 3, h.Connections(), "another waiter still listens")
	second.Stop()
	require.Eventually(t, func() bool { return h.Connections() == 0 }, 5*time.Second, time.Millisecond, "no key listened: no connection")
	for _, m := range nodes {
		require.Eventually(t, func() bool { return len(m.PubSubChannels("")) == 0 }, 5*time.Second, time.Millisecond, "unsubscribed")
	}
}

// A subscriber connection that drops is reopened and subscribed again:
// its confirmation goes while it is down, comes back, and notices flow
// again.
func TestHubResubscribesAfterTheConnectionDrops(t *testing.T) {
	m := redistest.Miniredis(t)
	p, err := faultnet.Listen(m.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	c := client(t, p.Addr())
	var got heard
	h := notice.New([]notice.Source{notice.Subscribable(c)}, got.deliver, notice.Options{Timeout: time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l := h.Listen("k")
	defer l.Stop()
	require.Equal(t, 1, l.Ready(ctx, 1, 5*time.Second))

	p.SetDown(true)
	p.DropConnections()
	require.Eventually(t, func() bool { return h.Confirmed("k") == 0 }, 5*time.Second, time.Millisecond, "a dropped connection confirms nothing")
	release(t, client(t, m.Addr()), "k", "lost") // while down: lost, as pub/sub loses it
	p.SetDown(false)
	require.Equal(t, 1, l.Ready(ctx, 1, 5*time.Second), "subscribed again")
	release(t, client(t, m.Addr()), "k", "v1")
	require.Eventually(t, func() bool { return got.count() == 1 }, 5*time.Second, time.Millisecond)
}

// A node that is not a go-redis client cannot subscribe; a Hub with none
// listens to nothing, and a key with no release channel is not listened.
func TestHubWithoutSubscribers(t *testing.T) {
	assert.Nil(t, notice.Subscribable(struct{}{}))
	h := notice.New([]notice.Source{nil}, func(string, notice.Turn, bool) {}, notice.Options{})
	assert.Zero(t, h.Nodes())
	assert.Nil(t, h.Listen("k"))
	m := redistest.Miniredis(t)
	h = notice.New([]notice.Source{notice.Subscribable(client(t, m.Addr()))}, func(string, notice.Turn, bool) {}, notice.Options{})
	assert.Nil(t, h.Listen("x}y"))
	var nilListener *notice.Listener
	nilListener.Stop()
	assert.Zero(t, nilListener.Ready(t.Context(), 1, time.Millisecond))
}

var joinLua = func() string {
	b, err := os.ReadFile("../../scripts/join.lua")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// The release script pops the next Locker from the key's line and names
// it: the named Locker's Hub delivers TurnThis, another's TurnOther, and a
// release with an empty line TurnOpen. Joining twice keeps one place; the
// releasing Locker's own place is dropped (it held the key); the script
// says 2 when it named a Locker.
func TestReleaseNamesTheNextLockerInLine(t *testing.T) {
	m := redistest.Miniredis(t)
	c := client(t, m.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var a, b heard
	ha := notice.New([]notice.Source{notice.Subscribable(c)}, a.deliver, notice.Options{Timeout: time.Second, ID: "A"})
	hb := notice.New([]notice.Source{notice.Subscribable(c)}, b.deliver, notice.Options{Timeout: time.Second, ID: "B"})
	for _, h := range []*notice.Hub{ha, hb} {
		l := h.Listen("k")
		defer l.Stop()
		require.Equal(t, 1, l.Ready(ctx, 1, 5*time.Second))
	}
	line, ok := notice.Line("k")
	require.True(t, ok)
	require.Equal(t, "{k}"+notice.LineSuffix, line)
	join := func(id string) {
		require.NoError(t, c.Eval(ctx, joinLua, []string{line}, id, 30000).Err())
	}
	unlock := func(value, id string) int {
		require.NoError(t, c.Set(ctx, "k", value, time.Minute).Err())
		n, err := unlock(ctx, c, "k", value, id).Int()
		require.NoError(t, err)
		return n
	}
	join("A")
	join("B")
	join("A") // keeps its place
	join("C")
	assert.Equal(t, []string{"A", "B", "C"}, c.LRange(ctx, line, 0, -1).Val())
	assert.InDelta(t, 30*time.Second, c.PTTL(ctx, line).Val(), float64(time.Second), "the line expires unless joined again")

	assert.Equal(t, 2, unlock("v1", "B"), "B released: its own place goes, A is named")
	require.Eventually(t, func() bool { return a.count() == 1 && b.count() == 1 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, []string{"C"}, c.LRange(ctx, line, 0, -1).Val())
	assert.Equal(t, 2, unlock("v2", "A"), "C is named")
	assert.Equal(t, 1, unlock("v3", "A"), "nobody left in line")
	assert.Equal(t, 1, unlock("v4", ""), "no id (another version): nobody named")
	require.Eventually(t, func() bool { return a.count() == 4 && b.count() == 4 }, 5*time.Second, time.Millisecond)
	a.mu.Lock()
	b.mu.Lock()
	defer a.mu.Unlock()
	defer b.mu.Unlock()
	assert.Equal(t, []notice.Turn{notice.TurnThis, notice.TurnOther, notice.TurnOpen, notice.TurnOpen}, a.turns)
	assert.Equal(t, []notice.Turn{notice.TurnOther, notice.TurnOther, notice.TurnOpen, notice.TurnOpen}, b.turns)
}

// Nodes that name different Lockers (they joined the lines in different
// orders): a Locker whose first majority named only others hears its own
// name later and is delivered the release again then, so that a named
// Locker always tries; as a shared turn (TurnShared: try after a
// stagger), since most nodes named others, who may be trying too.
func TestANamedLockerHearsItsTurnAfterOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var a heard
	clients := listeningOnThree(ctx, t, &a, 2)
	line, _ := notice.Line("k")
	release := func(c *redis.Client, next string) {
		require.NoError(t, c.RPush(ctx, line, next).Err())
		require.NoError(t, c.Set(ctx, "k", "v", time.Minute).Err())
		require.Equal(t, 2, int(unlock(ctx, c, "k", "v", "X").Val().(int64)))
	}
	release(clients[1], "B")
	release(clients[2], "C")
	require.Eventually(t, func() bool { return a.count() == 1 }, 5*time.Second, time.Millisecond, "a majority named others")
	release(clients[0], "A")
	require.Eventually(t, func() bool { return a.count() == 2 }, 5*time.Second, time.Millisecond, "then a node named A")
	a.mu.Lock()
	defer a.mu.Unlock()
	assert.Equal(t, []notice.Turn{notice.TurnOther, notice.TurnShared}, a.turns)
}

// One node of three names another Locker (a stale place: a Locker gone, a
// line that differs), the others name no one: the release is delivered as
// TurnOpen, so that every waiter may try, not TurnOther, which would keep
// them all out until their polls. Control: two nodes of three naming the
// other Locker deliver TurnOther. Named by one node of three, this Locker
// hears TurnShared (try after a stagger; its place there is gone); by two,
// TurnThis.
func TestAMinorityNamingAnotherLockerLeavesTheTurnOpen(t *testing.T) {
	for _, bc := range []struct {
		name   string
		naming int    // how many of the three nodes name named
		named  string // "B", another Locker, or "A", this one
		want   notice.Turn
	}{
		{"one-of-three-names-another", 1, "B", notice.TurnOpen},
		{"control-two-of-three-name-another", 2, "B", notice.TurnOther},
		{"one-of-three-names-this", 1, "A", notice.TurnShared},
		{"two-of-three-name-this", 2, "A", notice.TurnThis},
	} {
		t.Run(bc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			var a heard
			// Majority 3 of 3: the Hub weighs every node's notice, whatever
			// order they come in.
			clients := listeningOnThree(ctx, t, &a, 3)
			line, _ := notice.Line("k")
			for i, c := range clients {
				want := 1
				if i < bc.naming {
					require.NoError(t, c.RPush(ctx, line, bc.named).Err())
					want = 2
				}
				require.NoError(t, c.Set(ctx, "k", "v", time.Minute).Err())
				require.Equal(t, want, int(unlock(ctx, c, "k", "v", "X").Val().(int64)))
			}
			require.Eventually(t, func() bool { return a.count() == 1 }, 5*time.Second, time.Millisecond)
			a.mu.Lock()
			defer a.mu.Unlock()
			assert.Equal(t, []notice.Turn{bc.want}, a.turns)
		})
	}
}

// listeningOnThree starts three in-process nodes and a Hub of Locker "A"
// over them (majority as given) that listens for "k", confirmed on all
// three until the test ends; it delivers to a, and returns the nodes'
// clients.
func listeningOnThree(ctx context.Context, t *testing.T, a *heard, majority int) []*redis.Client {
	t.Helper()
	var clients []*redis.Client
	var sources []notice.Source
	for range 3 {
		c := client(t, redistest.Miniredis(t).Addr())
		clients = append(clients, c)
		sources = append(sources, notice.Subscribable(c))
	}
	h := notice.New(sources, a.deliver, notice.Options{Timeout: time.Second, Majority: majority, ID: "A"})
	l := h.Listen("k")
	t.Cleanup(l.Stop)
	require.Equal(t, 3, l.Ready(ctx, 3, 5*time.Second))
	return clients
}
