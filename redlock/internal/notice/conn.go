package notice

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one node's subscriptions: a connection per name its Source
// gives (one for a plain node; one per shard of a Redis Cluster node).
type node struct {
	hub    *Hub
	source Source

	mu     sync.Mutex
	conns  map[string]*conn // by name
	byChan map[string]*conn // channel -> the connection it is wanted on
}

// add wants channel subscribed on this node.
func (n *node) add(channel string) {
	ctx, cancel := context.WithTimeout(context.Background(), n.hub.opts.Timeout)
	client, name, err := n.source(ctx, channel)
	cancel()
	if err != nil {
		return // the shard is unknown now: this node is polled for the key
	}
	// Against a Stop (or another Listen) of the same key racing this
	// call: the node's wanted channels change under the Hub's lock, and
	// only while the key is listened for (Hub.listening).
	h := n.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.listening(channel) {
		return // stopped meanwhile
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byChan == nil {
		n.byChan = map[string]*conn{}
	}
	c := n.conns[name]
	if c == nil {
		c = &conn{node: n, name: name, client: client, kick: make(chan struct{}, 1), want: map[string]bool{}, sent: map[string]bool{}, confirmed: map[string]bool{}}
		n.conns[name] = c
		go c.manage()
	}
	c.mu.Lock()
	c.want[channel] = true
	c.mu.Unlock()
	n.byChan[channel] = c
	c.poke()
}

// remove gives channel up on this node.
func (n *node) remove(channel string) {
	h := n.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.listening(channel) {
		return // listened for again since: keep it
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.byChan[channel]
	if c == nil {
		return
	}
	delete(n.byChan, channel)
	c.mu.Lock()
	delete(c.want, channel)
	c.mu.Unlock()
	c.poke()
}

// confirmed reports whether channel's subscription is confirmed here.
func (n *node) confirmed(channel string) bool {
	n.mu.Lock()
	c := n.byChan[channel]
	n.mu.Unlock()
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.confirmed[channel]
}

// conn is one subscriber connection. Its manager goroutine alone sends
// (subscribes, unsubscribes, opens and closes); its reader goroutine alone
// receives. Invariant, kept under mu: sent is what the current PubSub was
// asked to subscribe, confirmed what it confirmed (a subset), and want is
// what should be; the manager moves sent to want whenever poked, and a
// connection with nothing wanted closes and leaves its node.
type conn struct {
	node   *node
	name   string
	client Client
	kick   chan struct{} // buffered: the manager has work

	mu        sync.Mutex
	want      map[string]bool
	sent      map[string]bool
	confirmed map[string]bool
	ps        *redis.PubSub // nil until opened, and after it died
	mode      int           // modeUnknown until probed
	failures  int           // in a row, for the backoff
	closed    bool
}

const (
	modeUnknown = iota
	modeSharded // SSUBSCRIBE, as the release script's SPUBLISH
	modePlain   // SUBSCRIBE: the server has no SPUBLISH, or may not use it
)

func (c *conn) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// manage brings the connection to what is wanted, each time it is poked,
// until nothing is wanted.
func (c *conn) manage() {
	for range c.kick {
		if !c.step() {
			return
		}
	}
}

// step is one pass of manage; false once the connection closed.
func (c *conn) step() bool {
	n := c.node
	n.mu.Lock()
	c.mu.Lock()
	if len(c.want) == 0 {
		c.end()
		return false
	}
	mode, ps := c.mode, c.ps
	var any string
	for ch := range c.want {
		any = ch
		break
	}
	c.mu.Unlock()
	n.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), n.hub.opts.Timeout)
	defer cancel()
	if mode == modeUnknown {
		var err error
		if mode, err = c.probe(ctx, any); err != nil {
			c.retryLater()
			return true
		}
		c.mu.Lock()
		c.mode = mode
		c.mu.Unlock()
	}
	if ps == nil {
		ps = c.open(ctx, mode)
	}
	if err := c.subscribe(ctx, mode, ps); err != nil {
		c.retryLater() // the reader sees the connection fail, and go-redis reopens it
	}
	return true
}

// end closes the connection, which nothing wants any more, and takes it
// out of its node's. Called with the node's lock and the connection's
// held, it releases both.
func (c *conn) end() {
	n := c.node
	c.closed = true
	if n.conns[c.name] == c {
		delete(n.conns, c.name)
	}
	ps := c.ps
	c.ps = nil
	c.mu.Unlock()
	n.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	n.hub.signal()
}

// open opens the connection's subscriber, of sharded or plain channels as
// mode says, with nothing subscribed yet, and starts its reader.
func (c *conn) open(ctx context.Context, mode int) *redis.PubSub {
	var ps *redis.PubSub
	if mode == modeSharded {
		ps = c.client.SSubscribe(ctx)
	} else {
		ps = c.client.Subscribe(ctx)
	}
	c.mu.Lock()
	c.ps = ps
	c.sent = map[string]bool{}
	c.mu.Unlock()
	go c.read(ps)
	return ps
}

// subscribe brings the channels ps is subscribed to (sent) to those
// wanted: it subscribes to what is new and unsubscribes from what is no
// longer wanted.
func (c *conn) subscribe(ctx context.Context, mode int, ps *redis.PubSub) error {
	c.mu.Lock()
	var add, drop []string
	for ch := range c.want {
		if !c.sent[ch] {
			add = append(add, ch)
		}
	}
	for ch := range c.sent {
		if !c.want[ch] {
			drop = append(drop, ch)
		}
	}
	c.mu.Unlock()
	var err error
	if len(add) > 0 {
		if mode == modeSharded {
			err = ps.SSubscribe(ctx, add...)
		} else {
			err = ps.Subscribe(ctx, add...)
		}
	}
	if err == nil && len(drop) > 0 {
		if mode == modeSharded {
			err = ps.SUnsubscribe(ctx, drop...)
		} else {
			err = ps.Unsubscribe(ctx, drop...)
		}
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	for _, ch := range add {
		c.sent[ch] = true
	}
	for _, ch := range drop {
		delete(c.sent, ch)
		delete(c.confirmed, ch)
	}
	c.failures = 0
	c.mu.Unlock()
	return nil
}

// probe finds out whether the release script's SPUBLISH works here, by
// publishing an empty notice (which subscribers ignore): sharded if it
// does, plain channels if the server refuses (no such command, or an ACL
// that denies it: the script then falls back to PUBLISH). An error is a
// failed call: ask again later.
func (c *conn) probe(ctx context.Context, channel string) (int, error) {
	err := c.client.Do(ctx, "SPUBLISH", channel, "").Err()
	var refused redis.Error
	switch {
	case err == nil:
		return modeSharded, nil
	case errors.As(err, &refused):
		// Only a refusal that lasts means plain channels: no such command,
		// or an ACL that denies it. LOADING, BUSY, MOVED, TRYAGAIN and the
		// like are passing: ask again.
		msg := strings.ToLower(refused.Error())
		if strings.Contains(msg, "unknown command") || strings.HasPrefix(msg, "noperm") {
			return modePlain, nil
		}
	}
	return modeUnknown, err
}

// retryLater pokes the manager again after backoff.
func (c *conn) retryLater() { time.AfterFunc(c.backoff(), c.poke) }

// backoff counts one more failure in a row and returns the wait before
// the next try: 50 ms doubling, up to a second.
func (c *conn) backoff() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures++
	return min(time.Second, 25*time.Millisecond<<min(c.failures, 6))
}

// read receives on ps until it is closed or replaced: confirmations,
// notices, pongs. A connection silent past a ping is reopened.
func (c *conn) read(ps *redis.PubSub) {
	h := c.node.hub
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), h.opts.Ping)
		c.mu.Lock()
		current := c.ps == ps && !c.closed
		c.mu.Unlock()
		if !current {
			return
		}
		if err != nil {
			if isTimeout(err) {
				if !pinged {
					pinged = true
					_ = ps.Ping(context.Background())
					continue
				}
				c.reopen(ps) // no pong: the connection is gone
				return
			}
			var refused redis.Error
			if errors.As(err, &refused) {
				// A refused subscription (BUSY, say): go-redis does not
				// say which, so every unconfirmed channel is sent again,
				// after a backoff.
				c.mu.Lock()
				for ch := range c.sent {
					if !c.confirmed[ch] {
						delete(c.sent, ch)
					}
				}
				c.mu.Unlock()
				c.retryLater()
				continue
			}
			// The connection failed (closed, killed, reset): go-redis
			// reopens it at the next receive and subscribes again; the
			// confirmations come as messages.
			c.unconfirm()
			time.Sleep(c.backoff())
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			c.mu.Lock()
			switch m.Kind {
			case "subscribe", "ssubscribe":
				// Wanted is enough: the confirmation may come before the
				// manager has marked the channel sent.
				if c.want[m.Channel] || c.sent[m.Channel] {
					c.confirmed[m.Channel] = true
				}
				c.failures = 0
			case "unsubscribe", "sunsubscribe":
				// Ours, or the server's (a sharded channel whose slot
				// moved away): not heard here any more.
				delete(c.confirmed, m.Channel)
				if c.want[m.Channel] && c.sent[m.Channel] {
					delete(c.sent, m.Channel) // ask again
					c.poke()
				}
			}
			c.mu.Unlock()
			h.signal()
		case *redis.Message:
			h.notice(m.Channel, m.Payload)
		}
	}
}

// unconfirm forgets every confirmation: the connection failed.
func (c *conn) unconfirm() {
	c.mu.Lock()
	changed := len(c.confirmed) > 0
	clear(c.confirmed)
	c.mu.Unlock()
	if changed {
		c.node.hub.signal()
	}
}

// reopen closes ps, a connection that stopped answering, and has the
// manager open another.
func (c *conn) reopen(ps *redis.PubSub) {
	c.mu.Lock()
	if c.ps == ps {
		c.ps = nil
		c.sent = map[string]bool{}
		clear(c.confirmed)
	}
	c.mu.Unlock()
	_ = ps.Close()
	c.node.hub.signal()
	c.poke()
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
