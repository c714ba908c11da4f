package guard

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
)

// TrustIf writes the trusted marker only where the node is as the check
// saw it: the same marker, for the same process. Anything else (a marker
// gone since, one rewritten since, one whose process is not the node's:
// loaded from another process's snapshot) is left as it is.
// miniredis names no run_id ("?"), as the trust script reads it.
func TestTrustIfTrustsOnlyWhatTheCheckSaw(t *testing.T) {
	const seenMarker = "1700000000000 ? 60000 ? 0 0 0 0"
	for _, tc := range []struct {
		name    string
		marker  string // on the node when the trust arrives ("": none)
		seen    Seen
		trusted bool
	}{
		{"as seen", seenMarker, Seen{Marker: seenMarker}, true},
		{"gone since (a flush, a restart without persistence)", "", Seen{Marker: seenMarker}, false},
		{"rewritten since (a new memory)", "1700000099000 ? 60000 ? 0 0 0 0", Seen{Marker: seenMarker}, false},
		{"as seen, but another process's (an old snapshot loaded)", "1700000000000 0123abcd 60000 ? 0 0 0 0", Seen{Marker: "1700000000000 0123abcd 60000 ? 0 0 0 0"}, false},
		{"as seen, but keys evicted since", "1700000000000 ? 60000 ? 0 0 0 7", Seen{Marker: "1700000000000 ? 60000 ? 0 0 0 7"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := redistest.Miniredis(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { c.Close() })
			if tc.marker != "" {
				require.NoError(t, m.Set(markerKey, tc.marker))
			}
			trusted, err := TrustIf(t.Context(), c, time.Minute, 0, tc.seen)
			require.NoError(t, err)
			assert.Equal(t, tc.trusted, trusted)
			got, _ := m.Get(markerKey)
			if tc.trusted {
				assert.Regexp(t, `^0 \? 60000 `, got, "trusted: a memory that began long ago")
			} else {
				assert.Equal(t, tc.marker, got, "left as it was")
			}
		})
	}
}
