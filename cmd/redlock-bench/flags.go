package main

import (
	"flag"
	"fmt"
	"io"
	"time"
)

type config struct {
	clients  int
	keys     int
	nodes    int
	ttl      time.Duration
	hold     time.Duration
	duration time.Duration
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("redlock-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.clients, "clients", 4, "concurrent clients")
	fs.IntVar(&c.keys, "keys", 1, "distinct lock names; 1 makes every client contend")
	fs.IntVar(&c.nodes, "embedded", 5, "in-process Redis nodes to start")
	fs.DurationVar(&c.ttl, "ttl", 10*time.Second, "lock TTL")
	fs.DurationVar(&c.hold, "hold", 0, "time inside the critical section")
	fs.DurationVar(&c.duration, "duration", 2*time.Second, "how long to run")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case c.clients < 1:
		return config{}, fmt.Errorf("-clients %d: need at least 1", c.clients)
	case c.keys < 1:
		return config{}, fmt.Errorf("-keys %d: need at least 1", c.keys)
	case c.nodes < 1 || c.nodes > 99:
		return config{}, fmt.Errorf("-embedded %d: need 1 to 99", c.nodes)
	case c.ttl <= 0:
		return config{}, fmt.Errorf("-ttl %v: must be positive", c.ttl)
	case c.hold < 0:
		return config{}, fmt.Errorf("-hold %v: must not be negative", c.hold)
	case c.hold >= c.ttl:
		return config{}, fmt.Errorf("-hold %v: must be shorter than -ttl %v", c.hold, c.ttl)
	case c.duration <= 0:
		return config{}, fmt.Errorf("-duration %v: must be positive", c.duration)
	}
	return c, nil
}
