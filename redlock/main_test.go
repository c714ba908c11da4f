package redlock_test

import (
	"context"
	"crypto/fips140"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock"
)

// TestMain learns every script's digest before the tests run, from a
// server (SCRIPT LOAD on miniredis), so that each test starts where a
// process that has used every script stands: its scripts go by digest
// (EVALSHA), and a server that never ran one answers NOSCRIPT, as on a
// server restarted or flushed. Why: a digest, once learned, serves the
// whole process, so without this a test would see EVAL or EVALSHA
// according to which tests ran before it. The tests of a process that
// learned nothing yet run alone in one (redistest.RunAlone), where this
// learns nothing.
func TestMain(m *testing.M) {
	if !redistest.InChild() {
		if err := learnScripts(); err != nil {
			fmt.Fprintln(os.Stderr, "learning the scripts' digests:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func learnScripts() error {
	var s *miniredis.Miniredis
	var err error
	fips140.WithoutEnforcement(func() { s, err = miniredis.Run() }) // as redistest.Miniredis hosts it
	if err != nil {
		return err
	}
	defer s.Close()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return redlock.LearnScripts(ctx, c)
}
