package guard

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock/internal/reply"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A history is covered only where every Locker waited for at least as many
// replicas as the node ever had, and at least one: a node with no replica
// and Lockers that wait for none is not covered (a replica may join unseen
// by anyone who would watch for it), nor is one whose history the server
// did not name.
func TestHistoryCovered(t *testing.T) {
	for _, tc := range []struct {
		h    history
		want bool
	}{
		{history{replid: "ab", wait: 1, replicas: 1}, true},
		{history{replid: "ab", wait: 2, replicas: 1}, true},
		{history{replid: "ab", wait: 1, replicas: 0}, true},
		{history{replid: "ab", wait: 1, replicas: 2}, false},
		{history{replid: "ab", wait: 0, replicas: 0}, false},
		{history{replid: "?", wait: 1, replicas: 1}, false},
		{history{wait: 1, replicas: 1}, false},
	} {
		assert.Equal(t, tc.want, tc.h.covered(), "%+v", tc.h)
	}
}

// Markers of every version parse; the history comes only with the
// eight-field form, and a malformed one is an error that shows it.
func TestParseMarker(t *testing.T) {
	m, err := parseMarker("1700000000000 abc 60000 f00d 12 1 2 7")
	require.NoError(t, err)
	assert.Equal(t, int64(1700000000000), m.began)
	assert.Equal(t, time.Minute, m.declared)
	assert.Equal(t, history{replid: "f00d", wait: 1, replicas: 2}, m.history)
	assert.Equal(t, int64(7), m.evicted)

	m, err = parseMarker("5 abc 1000")
	require.NoError(t, err)
	assert.Equal(t, time.Second, m.declared)
	assert.False(t, m.history.covered(), "a marker of an earlier version covers nothing")
	assert.Equal(t, int64(-1), m.evicted, "nor says what it evicted")

	m, err = parseMarker("5 abc")
	require.NoError(t, err)
	assert.Zero(t, m.declared)

	for _, bad := range []string{"", "x abc", "5 abc x", "5 abc 1000 f00d 0 -1 2 0", "5 abc 1000 f00d 0 1 2", "5 abc 1000 f00d 0 one 2 0", "5 abc 1000 f00d 0 1 2 x", "5 abc 1000 f00d 0 1 2 3 4"} {
		_, err := parseMarker(bad)
		assert.Error(t, err, "%q", bad)
		if err != nil {
			assert.Contains(t, err.Error(), "holds", "%q: the error shows the marker", bad)
		}
	}
}

// The replication companion: another replid, more replicas than the
// marker recorded, or a reply without those fields sends the guard to
// examine again; fewer replicas or the same do not. An ACL refusal is a
// named reply.ErrNoPermission, and any other error fails the votes.
func TestReplicationCompanion(t *testing.T) {
	h := history{replid: "f00d", wait: 2, replicas: 2}
	reply := func(replid string, slaves string) *redis.StringCmd {
		cmd := redis.NewStringCmd(t.Context(), replicationInfoArgs...)
		cmd.SetVal("# Replication\r\nrole:master\r\nconnected_slaves:" + slaves + "\r\nmaster_failover_state:no-failover\r\nmaster_replid:" + replid + "\r\nmaster_replid2:0000\r\n")
		return cmd
	}
	for _, tc := range []struct {
		replid, slaves string
		changed        bool
	}{
		{"f00d", "2", false},
		{"f00d", "1", false},
		{"f00d", "3", true},
		{"beef", "2", true},
		{"f00d", "x", true},
	} {
		changed, err := h.changedIn(reply(tc.replid, tc.slaves))
		require.NoError(t, err)
		assert.Equal(t, tc.changed, changed, "replid %s, %s replicas", tc.replid, tc.slaves)
	}
	missing := redis.NewStringCmd(t.Context())
	missing.SetVal("# Replication\r\nrole:master\r\n")
	changed, err := h.changedIn(missing)
	require.NoError(t, err)
	assert.True(t, changed, "a reply that does not say is a change")

	refused := redis.NewStringCmd(t.Context())
	refused.SetErr(redistest.ServerError("NOPERM User u has no permissions to run the 'info' command"))
	_, err = h.changedIn(refused)
	assert.ErrorIs(t, err, errNoPermission)
	assert.ErrorContains(t, err, "INFO replication")

	failed := redis.NewStringCmd(t.Context())
	failed.SetErr(errors.New("i/o timeout"))
	_, err = h.changedIn(failed)
	assert.ErrorContains(t, err, "i/o timeout")
}

// The vote that a weakening examination fails says why, and for how long.
func TestWeakenedVote(t *testing.T) {
	assert.ErrorIs(t, errWeakened, ErrNodeQuarantined)
	assert.Contains(t, errWeakened.Error(), "for this round trip")
	assert.Contains(t, errWeakened.Error(), "WaitReplicas")
}

// The eviction companion reads evicted_keys; a reply without it, or with
// something else there, fails the votes rather than pass them unwatched.
func TestEvictionCompanion(t *testing.T) {
	reply := func(body string) *redis.StringCmd {
		cmd := redis.NewStringCmd(t.Context(), statsInfoArgs...)
		cmd.SetVal(body)
		return cmd
	}
	n, err := evictedIn(reply("# Stats\r\nexpired_keys:3\r\nevicted_keys:42\r\nevicted_clients:0\r\n"))
	require.NoError(t, err)
	assert.Equal(t, int64(42), n)
	_, err = evictedIn(reply("# Stats\r\nexpired_keys:3\r\n"))
	assert.ErrorContains(t, err, "evicted_keys")
	_, err = evictedIn(reply("evicted_keys:many\r\n"))
	assert.ErrorContains(t, err, "many")
	refused := redis.NewStringCmd(t.Context())
	refused.SetErr(redistest.ServerError("NOPERM User u has no permissions to run the 'info' command"))
	_, err = evictedIn(refused)
	assert.ErrorIs(t, err, errNoPermission)
}

// errNoPermission is reply.ErrNoPermission, for tests whose locals are
// named reply.
var errNoPermission = reply.ErrNoPermission
