package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
)

// The labels of every container the harness starts, besides Label. Two
// runs of the suite on one Docker host (two checkouts, or a developer's and
// CI's) must not remove each other's containers: scripts/test.sh removes
// its own run's at the end (RunLabel), and scripts/clean-test-containers.sh
// removes what a crashed run of this checkout left (CheckoutLabel, whose
// PIDLabel process is gone), never another checkout's or a live run's.
const (
	CheckoutLabel = "redlock.test.checkout" // a hash of the repository's path ($REDLOCK_TEST_CHECKOUT)
	RunLabel      = "redlock.test.run"      // the run ($REDLOCK_TEST_RUN; else this process's)
	PIDLabel      = "redlock.test.pid"      // the process that owns the run ($REDLOCK_TEST_RUN_PID; else this one)
)

// containerLabels are the labels of a container the harness starts.
func containerLabels() map[string]string {
	pid := os.Getenv("REDLOCK_TEST_RUN_PID")
	if pid == "" {
		pid = strconv.Itoa(os.Getpid())
	}
	run := os.Getenv("REDLOCK_TEST_RUN")
	if run == "" {
		run = "pid-" + pid
	}
	return map[string]string{Label: "1", CheckoutLabel: Checkout(), RunLabel: run, PIDLabel: pid}
}

// Checkout names this checkout as scripts/clean-test-containers.sh does:
// $REDLOCK_TEST_CHECKOUT, else the first 12 hex digits of the SHA-256 of
// the repository's absolute path, symbolic links resolved.
func Checkout() string {
	if c := os.Getenv("REDLOCK_TEST_CHECKOUT"); c != "" {
		return c
	}
	_, file, _, _ := runtime.Caller(0) // .../test/integration/harness/labels.go
	repo := filepath.Join(filepath.Dir(file), "..", "..", "..")
	if resolved, err := filepath.EvalSymlinks(repo); err == nil {
		repo = resolved
	}
	sum := sha256.Sum256([]byte(repo))
	return hex.EncodeToString(sum[:])[:12]
}
