package redlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/redlock"
)

// TrustNewNodes called by a Locker with NoQuarantine examines each node
// all the same (with a guard of the moment), and trusts each on the
// condition that its marker is still the one that examination left. Here
// its trust of node 0 is held back between the two steps while the
// deployment comes into use: an operator trusts the nodes, a lease is
// granted on nodes 0 and 1, and node 0 restarts empty (its marker gone
// with the lease). No marker is not the marker the check saw, so node 0 is
// not declared whole, and nobody takes the key again while the first
// lease is valid. (A condition of "no marker" would hold again after the
// flush, and nodes 0 and 2 would grant the key a second time.)
func TestTrustNewNodesWithoutQuarantineDoesNotTrustANodeThatRestartedSinceItsCheck(t *testing.T) {
	ctx := t.Context()
	c := freshCluster(t, 3)
	reached, release := make(chan struct{}), make(chan struct{})
	starting := newLocker(t, c.nodes(func(i int, n redlock.Node) redlock.Node {
		if i != 0 {
			return n
		}
		return &trustGate{Node: n, before: func() { close(reached); <-release }}
	}), &redlock.Options{NoQuarantine: true})
	type result struct {
		trusted bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		trusted, err := starting.TrustNewNodes(ctx)
		done <- result{trusted, err}
	}()
	<-reached // checked: no node has a marker; trusting node 0 is held back

	proxies, nodes := holderNodes(t, c)
	holder := newLocker(t, nodes, nil)
	require.NoError(t, holder.TrustNodes(ctx), "an operator trusts the new deployment")
	lease := holdOnNodes01(t, c, proxies[2], holder, "k", 10*time.Second)
	c.servers[0].FlushAll() // node 0 restarts empty while the lease is held

	close(release)
	r := <-done
	require.NoError(t, r.err)
	assert.False(t, r.trusted, "node 0 changed since the check: not all trusted")
	requireNoSecondGrant(t, c, lease, "k", time.Second, nil)
}
