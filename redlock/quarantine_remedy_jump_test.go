package redlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Node 0 is a new server (no marker); nodes 1 and 2 are whole, but their
// clocks jump forward: quarantined for the jump alone, which a trust does
// not lift. The quorum error offers the trust for node 0; following it
// leaves nodes 1 and 2 out, and no majority. The offer must say so, as it
// does for a node quarantined for both causes ("a trust does not lift a
// clock jump's quarantine: ... stay out after it"), or not be made.
func TestQuarantineRemedySaysWhichNodesATrustLeavesOutForTheirClock(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	c.servers[0].Del("redlock:memory") // node 0: a new server
	jumpers := []*nodeClock{newNodeClock(c, 1, false), newNodeClock(c, 2, false)}
	l := newLocker(t, c.nodes(nil), nil)
	for range 5 { // readings of the clocks; nodes 1 and 2 make a majority
		lease, err := l.TryLock(ctx, "k", time.Second)
		require.NoError(t, err)
		require.NoError(t, lease.Unlock(ctx))
		drain(t, l)
		time.Sleep(5 * time.Millisecond)
	}
	for _, j := range jumpers {
		j.Advance(30 * time.Second)
	}
	_, err := l.TryLock(ctx, "k", time.Second)
	require.Error(t, err)
	drain(t, l)
	_, err = l.TryLock(ctx, "k", time.Second)
	require.Error(t, err)
	drain(t, l)
	msg := err.Error()
	require.Contains(t, msg, "its clock jumped forward by", msg)

	require.NoError(t, l.TrustNodes(ctx))
	_, after := l.TryLock(ctx, "k", time.Second)
	require.Error(t, after, "control: after the trust, nodes 1 and 2 are still out for their clocks: no majority")
	drain(t, l)
	if assert.Contains(t, msg, "trust -yes", "the offer is made") {
		assert.Regexp(t, `stay out after it`, msg, "the offer says nodes 1 and 2 stay out after the trust")
	}
}
