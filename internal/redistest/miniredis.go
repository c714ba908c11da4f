package redistest

import (
	"context"
	"crypto/fips140"
	"fmt"
	"net"
	"sync"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Miniredis starts a miniredis server for t (closed when t ends), hosted
// so that it may compute SHA-1 while the test itself runs under Go's FIPS
// 140-3 "only" mode (GODEBUG=fips140=only), where crypto/sha1 panics.
//
// Why: miniredis is the tests' Redis, and Redis names every script it
// caches by the SHA-1 of its source (EVAL, SCRIPT LOAD, redis.sha1hex):
// that is the server's work, not the client's. So the server is started
// inside crypto/fips140.WithoutEnforcement, whose bypass every goroutine
// spawned there inherits: miniredis's accept loop, and from it each
// connection's goroutine, where commands run. The test's own goroutines,
// and the library's, stay enforced. Without the bypass, miniredis panics
// in its connection's goroutine at the first EVAL or SCRIPT LOAD, which
// ends the test binary; HostsSHA1 checks, once per process, that a
// hosted server names a script by its SHA-1.
func Miniredis(t miniredis.Tester) *miniredis.Miniredis {
	var m *miniredis.Miniredis
	fips140.WithoutEnforcement(func() { m = miniredis.RunT(t) })
	if err := hostedOnce(); err != nil {
		t.Fatalf("%v", err)
	}
	return m
}

// Restart restarts m (after m.Close), hosted as Miniredis hosts it: its new
// accept loop must be spawned inside the bypass too.
func Restart(m *miniredis.Miniredis) error {
	var err error
	fips140.WithoutEnforcement(func() { err = m.Restart() })
	return err
}

// Dial is m.Dial (an in-memory connection, for tests in a synctest
// bubble, where sockets cannot be used) hosted as Miniredis hosts the
// server: the connection's goroutine, where its commands run, is spawned
// inside the bypass, so that it may compute SHA-1 under FIPS 140-3 "only"
// mode.
func Dial(m *miniredis.Miniredis) (net.Conn, error) {
	var c net.Conn
	var err error
	fips140.WithoutEnforcement(func() { c, err = m.Dial() })
	return c, err
}

// BubbleOptions are a go-redis client's options for a testing/synctest
// bubble, where its node is reached through dial (an in-memory connection)
// and retries are as given: an IP literal address (a name would be
// resolved outside the bubble), no maintenance notifications (a feature
// of Redis Enterprise and Redis Cloud) and no CLIENT SETINFO (nothing but
// the test's traffic), and a pool so large that no command ever waits for
// a connection: go-redis keeps the timers of that wait in a sync.Pool
// shared by the process, and a timer made in one bubble may not be used
// in another.
func BubbleOptions(addr string, dial func() (net.Conn, error), retries int) *redis.Options {
	return &redis.Options{
		Addr:                     addr,
		Dialer:                   func(context.Context, string, string) (net.Conn, error) { return dial() },
		MaxRetries:               retries,
		PoolSize:                 1 << 12,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// returnOneDigest is the SHA-1 of "return 1", as Redis names that script.
const returnOneDigest = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"

var hostedOnce = sync.OnceValue(func() error {
	var m *miniredis.Miniredis
	var err error
	fips140.WithoutEnforcement(func() { m, err = miniredis.Run() })
	if err != nil {
		return err
	}
	defer m.Close()
	return HostsSHA1(m.Addr())
})

// HostsSHA1 reports an error unless the server at addr names a script by
// its SHA-1 (SCRIPT LOAD), as Redis does.
func HostsSHA1(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	d, err := c.ScriptLoad(context.Background(), "return 1").Result()
	if err != nil {
		return fmt.Errorf("SCRIPT LOAD on %s: %w", addr, err)
	}
	if d != returnOneDigest {
		return fmt.Errorf("the server at %s named %q %s, not its SHA-1 %s", addr, "return 1", d, returnOneDigest)
	}
	return nil
}
