package guard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock/internal/reply"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// Trust declares node n's current memory complete (Locker.TrustNodes): it
// writes the marker of a memory that began long ago, for this server
// process, declaring maxTTL and waitReplicas as an examination would. On a
// Redis Cluster node it marks every hash slot, through the masters that
// serve them. An ACL refusal names the trust script and what it calls.
func Trust(ctx context.Context, n wire.Node, maxTTL time.Duration, waitReplicas int) error {
	if err := trust(ctx, n, maxTTL, waitReplicas); err != nil {
		return reply.Denied("the trust script (it calls "+trustScript.Calls+")", err)
	}
	return nil
}

// Seen is a node's marker as a check found it, before trusting the node
// (TrustIf).
type Seen struct {
	Marker string
}

// TrustIf trusts standalone node n as Trust does only where its marker is
// still as seen: the same value, written for the same process (see
// trust.lua), so that a node that restarted, was flushed, failed over or
// evicted keys since the check is not declared whole. It reports whether
// it wrote the marker. A Redis Cluster node is refused: its markers are
// per hash slot.
func TrustIf(ctx context.Context, n wire.Node, maxTTL time.Duration, waitReplicas int, seen Seen) (bool, error) {
	if _, cluster := n.(*redis.ClusterClient); cluster {
		return false, errors.New("redlock: a Redis Cluster node is not trusted on a condition")
	}
	if seen.Marker == "" {
		return false, errors.New("redlock: a trust on a condition needs the marker the check saw")
	}
	trusted, err := trustOn(ctx, n, maxTTL, waitReplicas, seen.Marker)
	if err != nil {
		return false, reply.Denied("the trust script (it calls "+trustScript.Calls+")", err)
	}
	return trusted, nil
}

func trust(ctx context.Context, n wire.Node, maxTTL time.Duration, waitReplicas int) error {
	_, err := trustOn(ctx, n, maxTTL, waitReplicas, "")
	return err
}

// trustOn writes n's markers; on a standalone node, only where its marker
// is seen (trust.lua's condition), if seen is not "".
func trustOn(ctx context.Context, n wire.Node, maxTTL time.Duration, waitReplicas int, seen string) (bool, error) {
	cc, ok := n.(*redis.ClusterClient)
	if !ok {
		// As EVAL: trusting is rare, and a digest would be one more thing
		// to learn from the node (see internal/luascript).
		written, err := n.Eval(ctx, trustScript.Src, []string{markerKey}, markerExpiry(), maxTTL.Milliseconds(), waitReplicas, MaxTTLLimit.Milliseconds(), seen).Int64()
		return written == 1, err
	}
	// Every slot's marker, written on the master that serves it, with that
	// master's run_id: plain SETs, in one pipeline per master (16,384
	// scripts would cost far more than the INFO per master this needs).
	masters := map[string]*redis.Client{}
	var mu sync.Mutex
	if err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		masters[c.Options().Addr] = c
		mu.Unlock()
		return nil
	}); err != nil {
		return false, err
	}
	ranges, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return false, err
	}
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		m, ok := masters[r.Nodes[0].Addr]
		if !ok {
			return false, fmt.Errorf("the master %s of slots %d-%d is not one the client knows", r.Nodes[0].Addr, r.Start, r.End)
		}
		p := processOf(ctx, m)
		if id, err := m.Do(ctx, "CLUSTER", "MYID").Text(); err == nil && id != "" {
			p.run += "@" + id // as examine.lua names a cluster node
		}
		declared, err := declaredOnSlots(ctx, m, int(r.Start), int(r.End))
		if err != nil {
			return false, err
		}
		if _, err := m.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for slot := r.Start; slot <= r.End; slot++ {
				// The longest MaxTTL declared is kept, as trust.lua keeps it.
				d := max(maxTTL, declared[int(slot-r.Start)])
				pipe.Set(ctx, slotMarker(int(slot)), fmt.Sprintf("0 %s %d %s %d %d %d %d", p.run, d.Milliseconds(), p.replid, p.fed, waitReplicas, p.replicas, p.evicted), 0)
			}
			return nil
		}); err != nil {
			return false, err
		}
	}
	return true, nil
}

// declaredOnSlots reads the MaxTTL declared in the markers of slots first
// to last on master m (0 where a marker is missing or says none), bounded
// as an examination reads it (declaredTTL).
func declaredOnSlots(ctx context.Context, m *redis.Client, first, last int) ([]time.Duration, error) {
	cmds, err := m.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for slot := first; slot <= last; slot++ {
			pipe.Get(ctx, slotMarker(slot))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]time.Duration, len(cmds))
	for i, c := range cmds {
		v, err := c.(*redis.StringCmd).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			return nil, err
		}
		if f := strings.Fields(v); len(f) >= 3 {
			out[i], _ = parseDeclared(f[2])
		}
	}
	return out, nil
}

// process is what a marker says of a server process: its run_id,
// master_replid, the bytes it read from a primary, its replicas, and the
// keys it evicted ("?" and 0 where the server does not say).
type process struct {
	run, replid  string
	fed, evicted int64
	replicas     int
}

// processOf reads a master's process as examine.lua reads it.
func processOf(ctx context.Context, c *redis.Client) process {
	info, err := c.Info(ctx, "server", "replication", "stats").Result()
	f := reply.InfoFields(info)
	p := process{run: f["run_id"], replid: f["master_replid"]}
	if err != nil || p.run == "" {
		p.run = "?"
	}
	if err != nil || p.replid == "" {
		p.replid = "?"
	}
	p.fed, _ = strconv.ParseInt(f["total_net_repl_input_bytes"], 10, 64)
	p.evicted, _ = strconv.ParseInt(f["evicted_keys"], 10, 64)
	p.replicas, _ = strconv.Atoi(f["connected_slaves"])
	return p
}
