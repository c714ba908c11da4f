// Package notice wakes a Locker's waiters when a key they wait for is
// released anywhere, by any process: the release script publishes the
// released value on the key's release channel (Channel), and a Hub keeps,
// per node, one subscriber connection listening on the channels of the
// keys its Locker has waiters for.
//
// The Lockers waiting for a key also queue on each node, in the key's line
// (Line, joined by the join script): a release pops the next Locker from
// the line and names it in the notice, so that of all the processes whose
// waiters hear the release only the named one tries (see Turn). Across
// Lockers, turns then go round in the order they joined, at one attempt
// per hand-off, instead of every Locker's head trying at each release.
//
// A notice is a hint, never a grant: the woken waiter still wins or loses
// by the quorum, and still polls (pub/sub drops messages while a
// subscriber reconnects, and an expired key publishes nothing). What the
// Hub adds is that a release is heard within a round trip instead of at
// the next poll.
//
// No missed wake-up: Listener.Ready waits until enough nodes confirmed the
// subscription, and the waiter's next attempt is sent after that, so a
// release after that attempt publishes to a subscribed connection on every
// confirmed node (a node orders the confirmation before the attempt, and
// the attempt before the release).
package notice

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/hashtag"
)

// Suffix names a key's release channel: see Channel. The release script
// (redlock/scripts/release.lua) names it the same way.
const Suffix = ":redlock-released"

// LineSuffix names a key's line: see Line. The release script names it the
// same way.
const LineSuffix = ":redlock-waiters"

// Line is key's line of waiting Lockers on a node, a list of Locker ids in
// key's hash slot; ok is false for a key that cannot carry a hash tag.
func Line(key string) (line string, ok bool) {
	l, err := hashtag.Beside(key, LineSuffix)
	return l, err == nil
}

// Turn is whose turn a release named, as a Hub delivers it: the next
// Locker in the key's line, on the nodes whose notices were heard.
type Turn uint8

const (
	// TurnOpen: this Locker was not named, and other Lockers not by most
	// of the nodes heard (none had joined the line there): every Locker's
	// waiter may try.
	TurnOpen Turn = iota
	// TurnThis: this Hub's Locker (Options.ID) was named by most of the
	// nodes heard.
	TurnThis
	// TurnOther: most of the nodes heard named other Lockers, none this
	// one: it waits.
	TurnOther
	// TurnShared: this Hub's Locker was named by some of the nodes heard,
	// not most (their lines differ): it tries after a stagger, as others
	// named may, and its place in those nodes' lines is gone (it joins
	// again if it loses).
	TurnShared
)

// Most reports whether named of the heard nodes' notices (or releases)
// are most of them: the one rule by which a release names a Locker's turn,
// in a Hub and in the releasing Locker's Unlock alike. One node's naming
// is not enough: its place may be stale (a Locker gone, a line that
// differs).
func Most(named, heard int) bool { return named > 0 && 2*named > heard }

// Channel is key's release channel, in key's hash slot (so that a Redis
// Cluster shard publishes it from a script that names only key); ok is
// false for a key that cannot carry a hash tag (it is then polled only).
func Channel(key string) (channel string, ok bool) {
	c, err := hashtag.Beside(key, Suffix)
	return c, err == nil
}

// Client is a node that can carry subscriptions: *redis.Client (also
// Sentinel's failover client) and, per shard, *redis.ClusterClient (see
// Subscribable).
type Client interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Source gives the client a channel's subscription goes to, and a name
// for its connection: the node itself, or a Redis Cluster's shard.
type Source func(ctx context.Context, channel string) (c Client, conn string, err error)

// Subscribable returns the Source of a node, or nil when the node cannot
// subscribe (a wrapper that is not a go-redis client): its releases are
// then heard by polling only.
func Subscribable(node any) Source {
	switch c := node.(type) {
	case *redis.ClusterClient:
		// One connection per shard: a sharded channel is served by the
		// master of its slot.
		return func(ctx context.Context, channel string) (Client, string, error) {
			shard, err := c.MasterForKey(ctx, channel)
			if err != nil {
				return nil, "", err
			}
			return shard, shard.Options().Addr, nil
		}
	case Client:
		return func(context.Context, string) (Client, string, error) { return c, "", nil }
	}
	return nil
}

// Options tune a Hub.
type Options struct {
	// Timeout bounds each probe and subscription call.
	Timeout time.Duration
	// Ping is how long a connection may stay silent before it is pinged,
	// and, once pinged, before it is taken for dead and reopened.
	Ping time.Duration
	// Majority is how many nodes' notices of one release wake the waiter
	// (fewer if fewer are subscribed); at least 1.
	Majority int
	// ID is this Hub's Locker, as it joins key lines: a release that
	// names it is delivered as TurnThis.
	ID string
}

// Hub is a Locker's subscriptions: per node, at most one connection (per
// shard, on a Redis Cluster node), subscribed to the release channels of
// the keys listened for, and closed when none are left.
type Hub struct {
	nodes   []*node // nil: the node cannot subscribe
	deliver func(key string, turn Turn, again bool)
	opts    Options

	active atomic.Int64 // len(keys), read without mu by Expect (every Unlock)

	mu      sync.Mutex
	keys    map[string]*listened // by key
	byChan  map[string]string    // channel -> key
	changed chan struct{}        // closed (and replaced) at every confirmation
}

// listened is one key listened for.
type listened struct {
	channel string
	refs    int
	recent  [4]release // the last releases noticed or expected
	next    int
}

// release is what the Hub knows of one released value: how many nodes'
// notices came, how many of them named this Locker's turn and how many
// another's, whether it was delivered (or expected: never), whether as
// this Locker's turn, and whether it was delivered again once every
// subscribed node's notice came.
type release struct {
	value        string
	heard        int
	mine, others int
	done         bool
	doneMine     bool
	expected     bool
	complete     bool
}

// New returns a Hub over sources (nil where a node cannot subscribe) that
// calls deliver with the key of each new notice and whose turn it named;
// again is true where the release was delivered before and every
// subscribed node has now told of it (see Hub.notice). deliver must not
// block.
func New(sources []Source, deliver func(key string, turn Turn, again bool), opts Options) *Hub {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.Ping <= 0 {
		opts.Ping = 15 * time.Second
	}
	opts.Majority = max(opts.Majority, 1)
	h := &Hub{deliver: deliver, opts: opts, keys: map[string]*listened{}, byChan: map[string]string{}, changed: make(chan struct{})}
	for _, s := range sources {
		var n *node
		if s != nil {
			n = &node{hub: h, source: s, conns: map[string]*conn{}}
		}
		h.nodes = append(h.nodes, n)
	}
	return h
}

// Nodes is how many nodes can subscribe.
func (h *Hub) Nodes() int {
	if h == nil {
		return 0
	}
	n := 0
	for _, nd := range h.nodes {
		if nd != nil {
			n++
		}
	}
	return n
}

// Listener is one waiter's hold on a key's subscription.
type Listener struct {
	hub     *Hub
	key     string
	channel string
	once    sync.Once
}

// Listen subscribes to key's release channel on every node that can
// subscribe, unless the key is listened for already. It does not wait:
// see Ready. It returns nil for a key with no release channel, or when
// no node can subscribe; a nil Listener's methods do nothing.
func (h *Hub) Listen(key string) *Listener {
	if h == nil || h.Nodes() == 0 {
		return nil
	}
	channel, ok := Channel(key)
	if !ok {
		return nil
	}
	h.mu.Lock()
	k := h.keys[key]
	first := k == nil
	if first {
		k = &listened{channel: channel}
		h.keys[key] = k
		h.byChan[channel] = key
		h.active.Add(1)
	}
	k.refs++
	h.mu.Unlock()
	if first {
		for _, n := range h.nodes {
			if n != nil {
				// In the background: finding a Cluster node's shard may
				// take a round trip, which must not hold Lock past its
				// context (Ready waits, bounded by the caller).
				go n.add(channel)
			}
		}
	}
	return &Listener{hub: h, key: key, channel: channel}
}

// Stop gives up this hold; the last one unsubscribes the channel, and a
// connection left with no channel closes.
func (l *Listener) Stop() {
	if l == nil {
		return
	}
	l.once.Do(func() {
		h := l.hub
		h.mu.Lock()
		k := h.keys[l.key]
		last := k != nil && k.refs == 1
		if k != nil {
			k.refs--
		}
		if last {
			delete(h.keys, l.key)
			delete(h.byChan, l.channel)
			h.active.Add(-1)
		}
		h.mu.Unlock()
		if last {
			for _, n := range h.nodes {
				if n != nil {
					n.remove(l.channel)
				}
			}
		}
	})
}

// Ready waits until at least need nodes confirmed the key's subscription,
// or timeout, or ctx ends, and returns how many had. An attempt sent after
// Ready returned k hears every release after it on those k nodes.
func (l *Listener) Ready(ctx context.Context, need int, timeout time.Duration) int {
	if l == nil {
		return 0
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		l.hub.mu.Lock()
		changed := l.hub.changed
		l.hub.mu.Unlock()
		got := l.hub.confirmed(l.channel)
		if got >= need {
			return got
		}
		if timer == nil {
			timer = time.NewTimer(timeout)
		}
		select {
		case <-changed:
		case <-timer.C:
			return l.hub.confirmed(l.channel)
		case <-ctx.Done():
			return got
		}
	}
}

// Confirmed is how many nodes confirmed key's subscription now.
func (h *Hub) Confirmed(key string) int {
	if h == nil {
		return 0
	}
	channel, ok := Channel(key)
	if !ok {
		return 0
	}
	return h.confirmed(channel)
}

func (h *Hub) confirmed(channel string) int {
	n := 0
	for _, nd := range h.nodes {
		if nd != nil && nd.confirmed(channel) {
			n++
		}
	}
	return n
}

// Expect marks value as a release this Locker is making itself (Unlock):
// its notices are not delivered, since the Locker wakes its own waiters.
func (h *Hub) Expect(key, value string) {
	if h == nil || h.active.Load() == 0 {
		return // no key listened: nothing to mark, and no lock taken
	}
	h.mu.Lock()
	if k := h.keys[key]; k != nil {
		r := k.find(value)
		r.done, r.doneMine, r.expected = true, true, true
	}
	h.mu.Unlock()
}

// Connections is how many subscriber connections are open, over all nodes.
func (h *Hub) Connections() int {
	if h == nil {
		return 0
	}
	n := 0
	for _, nd := range h.nodes {
		if nd != nil {
			nd.mu.Lock()
			n += len(nd.conns)
			nd.mu.Unlock()
		}
	}
	return n
}

// notice is a message on channel: the released value, and, after a
// newline, the Locker it named (values are printable ASCII).
func (h *Hub) notice(channel, message string) {
	if message == "" {
		return // a probe (see conn.probe)
	}
	value, named := message, ""
	if i := strings.LastIndexByte(message, '\n'); i >= 0 {
		value, named = message[:i], message[i+1:]
	}
	h.mu.Lock()
	key, ok := h.byChan[channel]
	k := h.keys[key]
	if !ok || k == nil {
		h.mu.Unlock()
		return
	}
	r := k.find(value)
	r.heard++
	switch {
	case named == "":
	case named == h.opts.ID:
		r.mine++
	default:
		r.others++
	}
	// Delivered once a majority's notices came (the key is then free on
	// a majority: an attempt can win), or as many as are subscribed, if
	// fewer. Waking at the first node's notice would send the attempt
	// while the release is still on its way to the others.
	//
	// Whose turn: this Locker's if most of the nodes heard named it;
	// another's if most named others and none this one; anyone's
	// otherwise. Nodes disagree when Lockers joined their lines in
	// different orders: then every Locker named somewhere tries, after a
	// stagger (TurnShared), since attempts sent at one moment would split
	// the nodes between them; and one node's stale place (a Locker gone, a
	// line that differs) must not keep every waiter out until its poll. A node that
	// names this Locker after the release was delivered as another's turn
	// delivers it again, as this one's: with three nodes naming three
	// Lockers, each Locker's first majority may be the two that name the
	// others, and someone must try.
	confirmed := h.confirmed(channel)
	enough := r.heard >= min(h.opts.Majority, max(confirmed, 1))
	wake := enough && (!r.done || (r.mine > 0 && !r.doneMine && r.others > 0))
	// A release delivered before every subscribed node's notice came is
	// delivered again when the last one comes. The attempt that the first
	// delivery woke may reach the other nodes before the release does (a
	// node slow to answer, or a confirmation not yet counted, so that one
	// notice was a majority of those confirmed): it finds the released
	// value still there, loses, and without this no later notice of the
	// release would wake it before its poll.
	again := !wake && r.done && !r.expected && !r.complete && r.heard >= confirmed
	turn := TurnOpen
	if wake || again {
		r.done = true
		r.doneMine = r.doneMine || r.mine > 0
		r.complete = r.complete || r.heard >= confirmed
		switch {
		case Most(r.mine, r.heard):
			turn = TurnThis
		case r.mine > 0:
			turn = TurnShared
		case Most(r.others, r.heard):
			turn = TurnOther
		}
	}
	h.mu.Unlock()
	if wake || again {
		h.deliver(key, turn, again)
	}
}

// signal wakes Ready's waits: a confirmation changed.
func (h *Hub) signal() {
	h.mu.Lock()
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// find returns value's release record, making one (in place of the
// oldest) if there is none.
func (k *listened) find(value string) *release {
	for i := range k.recent {
		if k.recent[i].value == value {
			return &k.recent[i]
		}
	}
	r := &k.recent[k.next]
	*r = release{value: value}
	k.next = (k.next + 1) % len(k.recent)
	return r
}

// listening reports whether channel's key is listened for; h.mu held.
func (h *Hub) listening(channel string) bool {
	_, ok := h.byChan[channel]
	return ok
}
