package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// -lockers spreads the clients over Lockers of their own; in lock mode the
// run reports the hand-off (one client's Unlock to the next one's Lock),
// and, on spawned nodes, the node commands per acquisition;
// redlock-nowake is the library with wake-ups off.
func TestLockersHandOffAndCommands(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on PATH")
	}
	out, err := runCLI(t, "-q", "-spawn", "3", "-clients", "4", "-lockers", "2", "-keys", "1", "-mode", "lock", "-hold", "1ms",
		"-duration", "600ms", "-impl", "redlock,redlock-nowake")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	for _, want := range []string{"2 Lockers (clients spread over them, as processes)", "wake-ups off (NoWakeUps"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^  hand-off `).FindAllString(out, -1)); n != 2 {
		t.Errorf("%d hand-off rows, want one per implementation:\n%s", n, out)
	}
	if n := len(regexp.MustCompile(`node commands: \d+\.\d per acquisition`).FindAllString(out, -1)); n != 2 {
		t.Errorf("%d node-command lines, want one per implementation:\n%s", n, out)
	}
	if out, err := runCLI(t, "-clients", "2", "-lockers", "3"); err == nil || !strings.Contains(err.Error(), "-lockers 3: need 1 to -clients (2)") {
		t.Errorf("-lockers above -clients: %v\n%s", err, out)
	}
}
