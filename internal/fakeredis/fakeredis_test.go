package fakeredis_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/fakeredis"
)

// go-redis connects (falling back to RESP2 when HELLO is refused) and gets
// the canned replies, singly and in a pipeline.
func TestCannedReplies(t *testing.T) {
	s, err := fakeredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx := t.Context()

	if err := c.Do(ctx, "SET", "k", "v", "NX", "PX", 1000, "GET").Err(); err != redis.Nil {
		t.Errorf("SET NX GET: %v, want redis.Nil (no old value)", err)
	}
	if n, err := c.EvalSha(ctx, "0123", []string{"k"}, "v").Int64(); err != nil || n != 1 {
		t.Errorf("EVALSHA: %d, %v", n, err)
	}
	if d, err := c.ScriptLoad(ctx, "return 1").Result(); err != nil || len(d) != 40 {
		t.Errorf("SCRIPT LOAD: %q, %v; want a stand-in digest", d, err)
	}
	if found, err := c.ScriptExists(ctx, "0123").Result(); err != nil || len(found) != 1 || !found[0] {
		t.Errorf("SCRIPT EXISTS: %v, %v", found, err)
	}
	if left, err := c.PTTL(ctx, "redlock:memory").Result(); err != nil || left < 100*365*24*time.Hour {
		t.Errorf("PTTL of the marker: %v, %v; want a century or more", left, err)
	}
	pipe := c.Pipeline()
	ping := pipe.Ping(ctx)
	eval := pipe.Eval(ctx, "return 1", nil)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if ping.Val() != "PONG" || eval.Val() != int64(1) {
		t.Errorf("pipeline: %q, %v", ping.Val(), eval.Val())
	}
}
