// Command redlock-chaos runs clients that take Redlock leases and do
// read-modify-write increments on a resource under them, while a seeded
// nemesis injects faults into the lock's nodes and the clients; then a
// referee judges every lease and every write, and porcupine judges the
// resource's history as a whole for linearizability.
//
//	redlock-chaos -seed 7 -duration 1m -svg run.svg
//
// It starts its own servers as plain processes on 127.0.0.1 (redis-server
// from PATH, or -server), one TCP proxy in front of each lock node for
// network faults, and the resources, which the nemesis leaves alone (the
// run judges the lock, not the resources' durability): one more Redis
// server and a SQLite table (pure Go, in-process). With -resource both (the
// default) even keys' counters live on the Redis server, guarded by
// fence.Redis, and odd keys' in the table, guarded by fence.SQL (the read
// records the token in the same transaction); -resource redis or sql puts
// them all on one.
//
// Configurations:
//
//	-config safe     fencing tokens (Options.Fencing), the node guard with
//	                 MaxTTL = -ttl, and the resource fenced on every access:
//	                 the read with fence.Redis.Get, the write with
//	                 fence.Redis.Set (in SQL, fence.SQL.Update for both)
//	-config unsafe   the negative control: no fencing (plain GET and SET),
//	                 the node guard's quarantines off (Options.NoQuarantine)
//
// Workload:
//
//	-clients K      clients (6), spread over -lockers L Lockers (2)
//	-keys N         lock names, each guarding one counter (2)
//	-ttl D          lease TTL (1s)
//	-hold D         the work between a section's read and its write (TTL/4)
//	-nodes N        lock nodes (5)
//	-duration D     how long the clients run (30s)
//	-mixed          leases of every shape: in one cycle of four a client
//	                locks two keys at once (LockMulti), in one it works
//	                under Do for three holds, past the TTL (off; -sim's
//	                schedules turn it on)
//
// Faults (-faults, comma-separated; all by default), one every -fault-every
// on average (2s), each on a random node or client, for a random time of
// about one TTL:
//
//	freeze      SIGSTOP the node, SIGCONT later (a stalled VM)
//	kill        SIGKILL, and a restart with no data (no persistence)
//	outage      a majority of the nodes killed at once and restarted with
//	            no data within a fraction of the TTL (a zone's power cut)
//	amnesia     FLUSHALL on a majority at once (the outage without downtime)
//	snapshot    SAVE, then later SIGKILL and a restart from that old snapshot
//	rollback    snapshot on a majority at once
//	partition   the node's proxy drops every connection and refuses new ones
//	blackhole   the node's proxy swallows everything (a silent partition)
//	latency     the node's proxy delays every reply by a third of the TTL
//	scriptflush SCRIPT FLUSH on the node
//	flush       FLUSHALL on the node (its keys lost)
//	evict       the node evicts: maxmemory-policy allkeys-random, a
//	            maxmemory a little above what it holds, and other data
//	            written every 5 ms, so that each write evicts a key (a lock's
//	            among them); all restored later
//	pressure    evict on a majority at once
//	clockjump   a majority's wall clocks step forward by one to two TTLs
//	            (servers run with a preloaded shim, clockshift/clockshift.c,
//	            built with the system's cc, that shifts CLOCK_REALTIME,
//	            gettimeofday and time by an offset the nemesis sets)
//	failover    on a majority at once, the replica is promoted (REPLICAOF NO
//	            ONE) while its primary goes on granting for a while, then
//	            the primary is killed and the node's proxy moves to the
//	            promoted replica: grants made in between are lost, as with
//	            asynchronous replication (every node gets a replica when
//	            -faults has failover; the old primary comes back as the new
//	            one's replica)
//	pause       a client stops for 1.5 TTL between its read and its write
//	            (a GC pause, the Kleppmann scenario)
//
// The referee counts: leases granted; overlapping validity windows (two
// clients believing they hold one lock at once); writes made after the
// writer's lease ran out; stale writes accepted (a write the resource took
// after it had taken an access from a newer lease); increments lost (accepted
// increments the final counter does not show); lock keys left on the nodes
// after the last TTL; lock calls that returned later than their deadline
// allows. porcupine checks the increments against a counter's sequential
// specification; when it finds a history not linearizable it writes its
// visualisation (-history FILE, default redlock-chaos-SEED.html in the
// temporary directory).
//
// With -models, each kind of fault in -faults runs alone, in the unsafe and
// then the safe configuration, with seeds -seed, -seed+1, ...; each fault
// is one trial of its failure model, and the output is a Markdown table of
// how many trials were followed by overlapping leases or stale writes
// accepted in each configuration (scripts/failure-report.sh writes it into
// docs/failure-results.md).
//
// With -sim, nothing starts: the clients' Lockers run against simulated
// nodes in virtual time (testing/synctest bubbles; docs/failure-models.md,
// "Simulation in virtual time"): -seeds schedules (300) of 30 s each from
// -seed, every kind of fault above and three more (clockrate: a majority's
// clocks running fast; lostreply: replies lost after the command ran;
// stall: a Locker's clock reading late by 1.5 TTL, a pause inside Lock),
// then the negative controls (-controls=false leaves them out), with a
// progress line; failing schedules' and the controls' timelines go to
// -artifacts DIR. -replays N runs the schedule of -seed N times and counts
// its verdicts (time is replayed, the interleaving of goroutines is not).
//
//	go run ./cmd/redlock-chaos -sim -seeds 1000
//
// Output: the seed, the fault schedule, the counts and the verdicts (-json
// for machines), and with -svg FILE a timeline of every client's leases and
// writes with the faults shaded and the violations marked. A run replays its
// fault schedule from its seed (the interleaving of real servers is not
// replayed). The exit status is 1 when the run fails its configuration's
// expectation: in the safe one, any stale write accepted, increment lost,
// key left or non-linearizable history; in the unsafe one, no violation seen
// at all (a control that sees nothing proves nothing). Bad flags exit 2.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGTERM too: the servers it started are stopped on the way out.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	var usage usageError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "redlock-chaos:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "redlock-chaos:", err)
		os.Exit(1)
	}
}

// run is the whole command: main only calls it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if cfg.simRun != nil {
		if err := os.MkdirAll(cfg.simRun.artefacts, 0o755); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "redlock-chaos: simulating from seed %d; timelines of failing schedules and of the controls' findings go to %s\n", cfg.seed, cfg.simRun.artefacts)
		return runSim(ctx, cfg, stdout, stderr)
	}
	if cfg.models {
		return runModels(ctx, cfg, stdout, stderr, chaos)
	}
	res, err := chaos(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	if err := res.write(stdout, cfg); err != nil {
		return err
	}
	if cfg.svg != "" {
		if err := writeTimeline(cfg.svg, res); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "redlock-chaos: timeline in %s\n", cfg.svg)
	}
	return res.verdict(cfg)
}
