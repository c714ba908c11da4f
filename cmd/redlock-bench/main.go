// Command redlock-bench measures what a Redlock lock cycle (acquire, hold,
// release) costs, and how it behaves under contention.
//
// With no flags it starts five in-process Redis nodes (miniredis, with real
// Lua scripting), runs a short workload against them, and prints the result,
// so it works on a machine with nothing installed:
//
//	go run ./cmd/redlock-bench
//
// Flags:
//
//	-clients N     concurrent clients (default 4)
//	-keys N        distinct lock names; 1 makes every client contend (default 1)
//	-ttl D         lock TTL (default 10s)
//	-hold D        time inside the critical section (default 0)
//	-duration D    how long to run (default 2s)
//	-embedded N    in-process nodes to start (default 5)
//
// In-process nodes share this process's CPU; their numbers show the
// library's own overhead, not a network's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "redlock-bench:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	nodes, describe, cleanup, err := embeddedNodes(cfg.nodes)
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Fprintf(stdout, "redlock-bench: %s; %d clients, %d keys, ttl %v, hold %v, %v\n",
		describe, cfg.clients, cfg.keys, cfg.ttl, cfg.hold, cfg.duration)
	res, err := bench(ctx, nodes, cfg)
	if err != nil {
		return err
	}
	res.print(stdout)
	return nil
}
