package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redisproc"
)

// A failover whose new replica did not start leaves the node without one
// (nil); closing the deployment must still stop everything else, not
// panic.
func TestCloseAfterAFailedReplicaStart(t *testing.T) {
	d := &deployment{replicas: []*redisproc.Server{nil}}
	assert.NotPanics(t, d.close)
}

// A fault that failed, wholly or in part (no replica, SAVE refused), is not
// a trial: the tables count only faults carried out.
func TestFailedFaultsAreNoTrials(t *testing.T) {
	faults := []fault{
		{Kind: "failover", Began: 0, Ended: 10 * ms, Err: "node 1 has no replica (starting its last one failed)"},
		{Kind: "failover", Began: 5 * time.Second, Ended: 6 * time.Second},
	}
	got := attribute(faults, nil, 100*ms)
	require.Len(t, got, 1)
	assert.Equal(t, 1, got[0].Faults, "only one failover was carried out")
}
