package redlock_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock"
)

// New checks in a fixed order, so that a configuration with several faults
// always reports the same one: every node (nil, duplicate, a multi-shard
// Ring under the guard), then the Options' own rules (RequireDurable
// without Fencing), and only then whether each node can carry the WAIT of
// WaitReplicas. (The transport's move to internal/wire had once moved the
// WAIT check first.)
func TestNewChecksInOrder(t *testing.T) {
	m1, m2 := redistest.Miniredis(t), redistest.Miniredis(t)
	c1 := redis.NewClient(&redis.Options{Addr: m1.Addr()})
	t.Cleanup(func() { c1.Close() })
	wrapper := struct{ redlock.Node }{c1} // not a *redis.Client: no WAIT

	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m1.Addr(), "b": m2.Addr()}})
	t.Cleanup(func() { ring.Close() })

	for _, tc := range []struct {
		name  string
		nodes []redlock.Node
		opts  redlock.Options
		want  string // what the first fault's error says
	}{
		{"nil node after a wrapper", []redlock.Node{wrapper, nil}, redlock.Options{WaitReplicas: 1}, "node 1 is nil"},
		{"multi-shard ring with the guard", []redlock.Node{ring}, redlock.Options{WaitReplicas: 1}, "*redis.Ring of 2 shards"},
		{"RequireDurable without Fencing", []redlock.Node{wrapper}, redlock.Options{WaitReplicas: 1, RequireDurable: true}, "RequireDurable needs Options.Fencing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			_, err := redlock.New(tc.nodes, &o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want the error saying %q", err, tc.want)
			}
		})
	}
}
