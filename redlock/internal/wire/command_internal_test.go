package wire

import (
	"crypto/fips140"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
)

// A script's wire form is EVAL with its source until a server named its
// digest, then EVALSHA with that digest: the very command go-redis's
// redis.NewScript would send, whose digest it computes on the client
// (here inside the bypass, for the comparison only).
func TestWireFormIsEVALUntilLearnedThenTheSameEVALSHA(t *testing.T) {
	m := redistest.Miniredis(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	s := loadScript("release", releaseScript.Calls)
	c := ScriptCommand(s, []string{"k"}, "v")
	require.Equal(t, []any{"eval", s.Src, 1, "k", "v"}, c.Wire())

	require.NoError(t, s.TrustFrom(t.Context(), client))
	var computed string
	fips140.WithoutEnforcement(func() { computed = redis.NewScript(s.Src).Hash() })
	require.Equal(t, []any{"evalsha", computed, 1, "k", "v"}, c.Wire())
}
