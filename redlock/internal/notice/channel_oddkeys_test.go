package notice_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redisproc"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock/internal/notice"
)

// oddKeys is a mix of odd keys: braces in every position, binary bytes,
// long keys, and random ones.
func oddKeys() []string {
	keys := []string{"", "{", "}", "{a", "a}", "{}", "}{", "{}{x}", "{x}{}", "a{}b{c}", "{{a}}", "{a{b}c}",
		"}{a}", "a}{b}", "a{b", "\x00", "{\x00}", "\xff{\xfe}\x00", "{\n}", "%{", "{%}", "[{]}", "{.*}", "a{" + strings.Repeat("b", 1000) + "}",
		strings.Repeat("k", 100000), strings.Repeat("{", 300) + "}", "{" + strings.Repeat("}", 300)}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{'{', '}', 'a', 0, 0xff, '%', '.'}
	for range 300 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		keys = append(keys, string(b))
	}
	return keys
}

// The release script computes the channel as Channel (hashtag.Beside) does,
// and never fails, for odd keys; on miniredis (PUBLISH) and on a real
// Redis 7 (SPUBLISH).
func TestScriptPublishesOnTheKeysChannelForOddKeys(t *testing.T) {
	m := redistest.Miniredis(t)
	servers := map[string]string{"miniredis": m.Addr()}
	if s, err := redisproc.Start(t.Context(), "redis-server"); err == nil {
		t.Cleanup(func() { s.Close() })
		servers["redis7"] = s.Addr()
	}
	for name, addr := range servers {
		t.Run(name, func(t *testing.T) {
			c := client(t, addr)
			ctx := context.Background()
			var ps *redis.PubSub
			if name == "redis7" {
				ps = c.PSubscribe(ctx, "*") // SPUBLISH is not seen by PSUBSCRIBE: check by SSUBSCRIBE per key below
			} else {
				ps = c.PSubscribe(ctx, "*")
			}
			defer ps.Close()
			_, err := ps.ReceiveTimeout(ctx, time.Second)
			require.NoError(t, err)
			for i, key := range oddKeys() {
				want, ok := notice.Channel(key)
				value := fmt.Sprintf("v%d", i)
				var sps *redis.PubSub
				if name == "redis7" && ok {
					sps = c.SSubscribe(ctx, want)
					_, err := sps.ReceiveTimeout(ctx, time.Second)
					require.NoError(t, err)
				}
				require.NoError(t, c.Set(ctx, key, value, time.Minute).Err())
				n, err := unlock(ctx, c, key, value, "").Int()
				require.NoError(t, err, "key %q", key)
				require.Equal(t, 1, n, "key %q", key)
				if sps != nil {
					msg, err := sps.ReceiveTimeout(ctx, time.Second)
					require.NoError(t, err, "key %q: no sharded notice on %q", key, want)
					require.Equal(t, value, msg.(*redis.Message).Payload)
					sps.Close()
					continue
				}
				if name == "redis7" {
					continue
				}
				msg, err := ps.ReceiveTimeout(ctx, 50*time.Millisecond)
				if !ok {
					require.Error(t, err, "key %q has no channel but published %v", key, msg)
					continue
				}
				require.NoError(t, err, "key %q", key)
				require.Equal(t, want, msg.(*redis.Message).Channel, "key %q", key)
				require.Equal(t, value, msg.(*redis.Message).Payload)
			}
		})
	}
}
