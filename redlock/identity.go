package redlock

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock/internal/guard"
	"github.com/redlock/redlock/redlock/internal/reply"
)

// One server under two names. Redlock's majority counts servers, and a
// Locker given one server twice counts it twice: with one other node
// failing, that server alone wins a quorum of three while the only
// independent node holds the key for someone else. It is caught at three
// points, each where it can be told:
//
//   - New compares the clients' addresses, with the obvious aliases of one
//     address resolved (sameServerAddr): "localhost" and "127.0.0.1", an
//     IPv4 address written as IPv6, a host name's case and trailing dot.
//     It cannot resolve DNS, nor look inside a Ring or a wrapper.
//   - Warm asks every node which server answers (INFO server's run_id; of
//     a Redis Cluster node, every master's) and fails the later node of a
//     pair with ErrDuplicateNode, naming both.
//   - The node guard learns the run_id at every examination and lets one
//     node of a pair vote; the other's votes fail with ErrDuplicateNode
//     naming both (see internal/guard/identity.go for which, and why). With
//     Options.NoQuarantine there is no guard and no check on the votes:
//     Warm and Health still compare the nodes.
//
// A server that does not say its run_id (INFO refused, or a server
// without it) is not compared.

// sameServerAddr is the address a client dials, written alike for the
// obvious aliases of one server: "localhost" is 127.0.0.1 (a Redis server's
// default bind has both loopbacks); an IP address in its canonical form (an
// IPv4 address written as IPv6 unwrapped); a host name in lower case,
// without the root's trailing dot; a Unix socket's path cleaned. The
// network's IP version does not count ("tcp4" is "tcp").
func sameServerAddr(network, addr string) string {
	if network == "unix" {
		return "unix|" + filepath.Clean(addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return network + "|" + addr
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || host == "" {
		host = "127.0.0.1"
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	return "tcp|" + net.JoinHostPort(host, port)
}

// servers returns the server processes that answer for the node: the
// run_id of a server (INFO server), or of each master of a Redis Cluster
// node (all its masters: two ClusterClients of one cluster share them).
// Empty where the node does not say.
func (n node) servers(ctx context.Context) []string {
	cc, ok := n.Node.(*redis.ClusterClient)
	if !ok {
		info, err := n.Do(ctx, "INFO", "server").Text()
		if run := runID(info, err); run != "" {
			return []string{run}
		}
		return nil
	}
	var (
		mu   sync.Mutex
		runs []string
	)
	_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if run := runID(m.Info(ctx, "server").Result()); run != "" {
			mu.Lock()
			runs = append(runs, run)
			mu.Unlock()
		}
		return nil
	})
	return runs
}

// runID reads the run_id of an INFO server reply; "" where there is none.
func runID(info string, err error) string {
	if err != nil {
		return ""
	}
	return reply.InfoFields(info)["run_id"]
}

// duplicate returns, for node j whose servers are runs[j], the error that
// names the first node before it that shares one (nil: none).
func duplicate(nodes []node, runs [][]string, j int) error {
	for i := range j {
		for _, run := range runs[j] {
			if slices.Contains(runs[i], run) {
				return &guard.DuplicateError{Node: j, Of: i, NodeName: nodes[j].name, OfName: nodes[i].name, Server: run}
			}
		}
	}
	return nil
}
