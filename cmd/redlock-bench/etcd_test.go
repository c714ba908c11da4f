//go:build etcd

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// etcd's Mutex on one member and on three, the second with its leader
// frozen for a while: locks are granted, the fault is carried out on the
// member that led, and the members are gone afterwards.
func TestEtcdImpl(t *testing.T) {
	// Attempts get 5 s (-etcd-timeout): a loaded machine under the race
	// detector may take seconds for a raft round, which is not what this
	// test is about.
	out, err := runCLI(t, "-impl", "etcd", "-etcd", "1", "-etcd-timeout", "5s", "-ops", "40", "-clients", "2", "-keys", "2", "-ttl", "2s")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if m := regexp.MustCompile(`; (\d+) acquired, 0 contended`).FindStringSubmatch(out); !strings.Contains(out, "1 member(s)") || m == nil || m[1] == "0" {
		t.Errorf("want grants on one member, and no contention on keys of their own:\n%s", out)
	}
	out, err = runCLI(t, "-impl", "etcd", "-etcd", "3", "-etcd-timeout", "5s", "-duration", "4s", "-clients", "2", "-keys", "2", "-ttl", "2s",
		"-fault", "freeze:leader@1s+1500ms")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`fault freeze:leader@1s\+1.5s: froze member m\d`).MatchString(out) {
		t.Errorf("the leader was not frozen:\n%s", out)
	}
	if m := regexp.MustCompile(`; (\d+) acquired`).FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Errorf("no lock granted on three members:\n%s", out)
	}
	if !strings.Contains(out, "longest time without a grant") {
		t.Errorf("no availability line:\n%s", out)
	}
	ps, _ := exec.Command("pgrep", "-f", "-c", filepath.Base(os.Args[0])).Output()
	if n, _ := strconv.Atoi(strings.TrimSpace(string(ps))); n > 1 {
		t.Errorf("%d processes of this binary left: the members were not stopped", n)
	}
}
