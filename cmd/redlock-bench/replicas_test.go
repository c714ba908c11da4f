package main

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// -fault freeze-replica:K@T freezes node K's replicas (SIGSTOP) and thaws
// them after: node K still answers, but its WAITs run to their timeout,
// while the other nodes' return at once. A redlock-wait run under it still
// grants leases, on the other nodes, and node K's failures show in the
// Health after the run. It needs replicas this run started.
func TestFreezeReplica(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"-fault", "freeze-replica:0@0s"}, "-fault freeze-replica:0@0s: needs -spawn and -replicas"},
			{[]string{"-spawn", "2", "-fault", "freeze-replica:0@0s"}, "-fault freeze-replica:0@0s: needs -spawn and -replicas"},
			{[]string{"-nodes", "a:1,b:2,c:3", "-fault", "freeze-replica:0@0s"}, "needs -spawn and -replicas"},
			{[]string{"-spawn", "2", "-replicas", "1", "-fault", "freeze-replica:2@0s"}, "there are only 2 nodes"},
			{[]string{"-spawn", "2", "-replicas", "1", "-impl", "etcd", "-fault", "freeze-replica:0@0s"}, "etcd members have no replicas"},
			{[]string{"-spawn", "2", "-replicas", "1", "-fault", "freeze-replica:0@soon"}, "bad time"},
			{[]string{"-fault", "thaw:0@0s"}, "freeze-replica:K@T[+D]"},
		} {
			out, err := runCLI(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%q: error %v; want %q\n%s", tt.args, err, tt.want, out)
			}
		}
	})
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not on PATH; scripts/test.sh installs it")
	}

	t.Run("only node K's WAIT times out", func(t *testing.T) {
		faults, err := parseFaults("freeze-replica:0@0s")
		if err != nil {
			t.Fatal(err)
		}
		d, err := newDeployment(t.Context(), config{spawn: 2, replicas: 1, faults: faults})
		if err != nil {
			t.Fatal(err)
		}
		defer d.close()
		if len(d.proxies) != 0 {
			t.Errorf("%d proxies: a replica fault needs none", len(d.proxies))
		}
		acks := func(node int, timeout time.Duration) int64 {
			t.Helper()
			return replicaAcks(t, d.options[node], timeout)
		}
		if n0, n1 := acks(0, 5*time.Second), acks(1, 5*time.Second); n0 != 1 || n1 != 1 {
			t.Fatalf("before the fault: WAIT 1 acknowledged by %d and %d replicas; want 1 each", n0, n1)
		}
		ctx, cancel := context.WithCancel(t.Context())
		reports := make(chan string, 1)
		d.inject(ctx, faults, func(s string) { reports <- s })
		if r := <-reports; !regexp.MustCompile(`^fault freeze-replica:0@0s: froze node 0's replica\(s\) 127\.0\.0\.1:\d+ `).MatchString(r) {
			t.Errorf("report %q", r)
		}
		// The freeze lands just after the report: wait until node 0's WAIT
		// runs out unacknowledged.
		deadline := time.Now().Add(10 * time.Second)
		for acks(0, 50*time.Millisecond) != 0 {
			if time.Now().After(deadline) {
				t.Fatal("node 0's WAIT still acknowledged 10 s after the fault")
			}
		}
		if n1 := acks(1, 5*time.Second); n1 != 1 {
			t.Errorf("node 1's WAIT acknowledged by %d replicas while node 0's were frozen; want 1", n1)
		}
		cancel()
		d.injecting.Wait()
		if n0 := acks(0, 5*time.Second); n0 != 1 {
			t.Errorf("after the fault: node 0's WAIT acknowledged by %d replicas; want 1 (thawed)", n0)
		}
	})

	t.Run("a run under it", func(t *testing.T) {
		// A NodeTimeout of 400ms (WAIT 200ms) for a loaded machine under the
		// race detector: the healthy nodes must not fail too.
		out, err := runCLI(t, "-q", "-spawn", "3", "-replicas", "1", "-impl", "redlock-wait", "-clients", "2", "-keys", "1",
			"-mode", "lock", "-fault", "freeze-replica:0@0s", "-ops", "30", "-node-timeout", "400ms")
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out)
		}
		if !strings.Contains(out, "fault freeze-replica:0@0s: froze node 0's replica(s) 127.0.0.1:") {
			t.Errorf("the run does not say what it injected:\n%s", out)
		}
		m := regexp.MustCompile(`; (\d+) acquired, \d+ contended, \d+ errors`).FindStringSubmatch(out)
		if m == nil || m[1] == "0" {
			t.Fatalf("no lease granted with node 0's replica frozen:\n%s", out)
		}
		granted, _ := strconv.Atoi(m[1])
		after := strings.Index(out, "node health after the run")
		if after < 0 {
			t.Fatalf("no Health after the run:\n%s", out)
		}
		failures := make([]int, 3)
		for i := range failures {
			row := regexp.MustCompile(`node ` + strconv.Itoa(i) + ` \(127\.0\.0\.1:\d+\)\s+\S+\s+(\d+)\s`).FindStringSubmatch(out[after:])
			if row == nil {
				t.Fatalf("no node %d row after the run:\n%s", i, out[after:])
			}
			failures[i], _ = strconv.Atoi(row[1])
		}
		// Every acquisition sent node 0 at least one attempt, and each
		// failed as not replicated.
		if failures[0] < granted || failures[0] <= failures[1] || failures[0] <= failures[2] {
			t.Errorf("failures by node %v for %d leases: want node 0's at least one a lease, and above the others'\n%s", failures, granted, out)
		}
	})
}

// replicaAcks writes to the node and returns how many replicas WAIT says
// acknowledged the write within timeout.
func replicaAcks(t *testing.T, o *redis.Options, timeout time.Duration) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: o.Addr, MaxRetries: -1, ReadTimeout: timeout + 5*time.Second})
	defer c.Close()
	conn := c.Conn() // WAIT counts the acknowledgements of this connection's writes
	defer conn.Close()
	if err := conn.Set(t.Context(), "redlock-bench:replica-probe", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := conn.Wait(t.Context(), 1, timeout).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
