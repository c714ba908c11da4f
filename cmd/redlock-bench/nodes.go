package main

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/redlock"
)

// embeddedNodes starts n in-process Redis servers and returns clients for
// them, a description, and a function that stops them.
func embeddedNodes(n int) ([]redlock.Node, string, func(), error) {
	var servers []*miniredis.Miniredis
	var clients []*redis.Client
	cleanup := func() {
		for _, c := range clients {
			c.Close()
		}
		for _, s := range servers {
			s.Close()
		}
	}
	nodes := make([]redlock.Node, 0, n)
	for range n {
		s, err := miniredis.Run()
		if err != nil {
			cleanup()
			return nil, "", nil, fmt.Errorf("starting an in-process node: %w", err)
		}
		servers = append(servers, s)
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		clients = append(clients, c)
		nodes = append(nodes, c)
	}
	return nodes, fmt.Sprintf("%d embedded in-process Redis nodes (miniredis)", n), cleanup, nil
}
