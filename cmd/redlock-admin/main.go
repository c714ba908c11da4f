// Command redlock-admin is the operator's view of a Redlock deployment: who
// holds a lock and for how long, each node's health and guard state, an
// operator's forced release, and trust for new nodes.
//
// Usage:
//
//	redlock-admin -nodes host:port,... [flags] health
//	redlock-admin -nodes host:port,... [flags] inspect KEY
//	redlock-admin -nodes host:port,... [flags] revoke [-yes] KEY
//	redlock-admin -nodes host:port,... [flags] trust [-yes]
//
// The nodes are given as the application gives them to redlock.New: every
// master, in any order (host:port, or redis:// and rediss:// URLs that carry
// the ACL user and password, rediss://user:password@host:port). The TLS
// flags are the benchmark's:
//
//	-tls-ca FILE     trust these CA certificates for rediss:// nodes
//	-tls-cert FILE   present this client certificate (with -tls-key)
//	-tls-key FILE    the client certificate's private key
//	-timeout D       each node's deadline (Options.NodeTimeout; 1s)
//	-owner LABEL     who revokes, as events and logs name it (default user@host)
//	-json            print JSON instead of a table, for scripts
//
// health reads each node's settings (role, version, persistence, eviction)
// and the node guard's verdict on its memory, which this command learns by
// examining each node's guard marker (-probe KEY: a key to read while doing
// so; pick one the ACL user may read). Clock rates need many samples, which
// a fresh process has not taken: they show in the application's own
// Locker.Health.
//
// inspect KEY shows, for each node, whether the key is held, the value and
// its owner label (Options.Owner), the time left, the fencing token
// recorded for the value it holds and the fencing counter, a revoked
// value's tombstone, and the guard's state; then the holder of a majority,
// if any, for how much longer, and its fencing token: the number its
// Lease.Token returns (counter<<8 | the issuing node's label).
//
// revoke KEY deletes the key on every node, whatever its value, and leaves a
// tombstone so that the holder's next extension fails (Locker.Revoke).
// Without -yes it only inspects the key and says what -yes would delete.
//
// trust declares every node's memory whole (Locker.TrustNodes), lifting the
// node guard's quarantine after a restart or for new nodes. Only for nodes
// known to hold no locks that may still be in use. Without -yes it only
// shows the quarantines it would lift.
//
// It is its own command, in the library's module, rather than subcommands of
// redlock-bench: the benchmark's module pulls in etcd and redsync to compare
// against, which an operator's host does not need, and a command that
// deletes locks should not share a binary, and its flags, with load tests.
// It shares the benchmark's node flags (internal/nodeflag).
//
// Exit status: 0 on success, 1 when an operation failed on some node (the
// output says which), 2 for a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/nodeflag"
	"github.com/redlock/redlock/redlock"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// config is the command line, parsed.
type config struct {
	nodes   []string
	tls     nodeflag.TLSFiles
	timeout time.Duration
	owner   string
	json    bool
	yes     bool
	probe   string
	command string
	key     string
}

// errUsage marks a command-line mistake (exit status 2).
var errUsage = errors.New("usage")

const usage = `usage: redlock-admin -nodes host:port,... [flags] health | inspect KEY | revoke [-yes] KEY | trust [-yes]`

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	var nodes string
	fs := flag.NewFlagSet("redlock-admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&nodes, "nodes", "", "comma-separated `host:port` or redis:// / rediss:// URLs of every node, as the application gives them")
	fs.StringVar(&c.tls.CA, "tls-ca", "", "rediss:// nodes: trust the CA certificates in this PEM `file` (default: the system's)")
	fs.StringVar(&c.tls.Cert, "tls-cert", "", "rediss:// nodes: present this client certificate (PEM `file`; with -tls-key)")
	fs.StringVar(&c.tls.Key, "tls-key", "", "rediss:// nodes: the client certificate's private key (PEM `file`)")
	fs.DurationVar(&c.timeout, "timeout", time.Second, "each node's deadline (Options.NodeTimeout)")
	fs.StringVar(&c.owner, "owner", defaultOwner(), "who revokes: the owner label of this command's Locker (Options.Owner)")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	fs.BoolVar(&c.yes, "yes", false, "revoke, trust: do it (without -yes they show what they would do)")
	fs.StringVar(&c.probe, "probe", "redlock-admin:probe", "health: the `key` read while the node guard examines each node (one the ACL user may read)")
	// Flags may come before and after the subcommand.
	if err := fs.Parse(args); err != nil {
		return c, errUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprintln(stderr, usage)
		return c, errUsage
	}
	c.command = rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		return c, errUsage
	}
	positional := fs.Args()
	c.nodes = nodeflag.Split(nodes)
	fail := func(format string, a ...any) (config, error) {
		fmt.Fprintf(stderr, "redlock-admin: "+format+"\n", a...)
		return c, errUsage
	}
	switch c.command {
	case "health", "trust":
		if len(positional) != 0 {
			return fail("%s takes no arguments, got %q", c.command, positional)
		}
	case "inspect", "revoke":
		if len(positional) != 1 {
			return fail("%s takes one KEY, got %d arguments", c.command, len(positional))
		}
		c.key = positional[0]
	default:
		return fail("unknown command %q (want health, inspect, revoke or trust)", c.command)
	}
	switch {
	case len(c.nodes) == 0:
		return fail("-nodes: give every node of the deployment")
	case c.timeout <= 0:
		return fail("-timeout %v: must be positive", c.timeout)
	}
	return c, nil
}

// defaultOwner is "redlock-admin user@host", as far as they are known.
func defaultOwner() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	owner := "redlock-admin " + name + "@" + host
	return strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' || r == '|' {
			return '_'
		}
		return r
	}, owner)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if err != nil {
		return 2
	}
	options, err := nodeflag.Options(c.nodes, c.tls)
	if err != nil {
		fmt.Fprintln(stderr, "redlock-admin:", err)
		return 2
	}
	nodes := make([]redlock.Node, len(options))
	for i, o := range options {
		client := redis.NewClient(o)
		defer client.Close()
		nodes[i] = client
	}
	l, err := redlock.New(nodes, &redlock.Options{NodeTimeout: c.timeout, Owner: c.owner})
	if err != nil {
		fmt.Fprintln(stderr, "redlock-admin:", err)
		return 2
	}
	defer func() {
		drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = l.Drain(drain)
	}()
	// Dial every node and load the scripts first, so that each node's
	// deadline is its command's, not its handshake's.
	warm, cancel := context.WithTimeout(ctx, max(5*time.Second, 3*c.timeout))
	_ = l.Warm(warm) // a node that cannot be reached says so in the output
	cancel()

	out := printer{w: stdout, json: c.json}
	switch c.command {
	case "health":
		err = health(ctx, l, c, out)
	case "inspect":
		err = inspect(ctx, l, c.key, out)
	case "revoke":
		err = revoke(ctx, l, c, out)
	case "trust":
		err = trust(ctx, l, c, out)
	}
	if err != nil {
		fmt.Fprintln(stderr, "redlock-admin:", err)
		return 1
	}
	return 0
}
