package redistest

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// childEnv marks a process of the test binary that runs one test for its
// parent (RunAlone); its value is the test's name.
const childEnv = "REDLOCK_TEST_CHILD"

// RunAlone runs the top-level test t again, alone, in a new process of the
// test binary, with env added to this process's environment, and returns
// ran, what it printed and how it exited; ran is false there, in the
// child, where the test goes on with its body instead.
//
// Why a process: what a test needs may be the state of a whole process,
// which no test may reset in its own: Go's FIPS 140-3 mode is chosen when
// a process starts (GODEBUG=fips140=only), and a script's digest, once
// learned, serves the whole process (internal/luascript).
//
//	if ran, out, err := redistest.RunAlone(t, "GODEBUG=fips140=only"); ran {
//		require.NoError(t, err, out)
//		return
//	}
//	// the body, in the child
func RunAlone(t *testing.T, env ...string) (ran bool, out string, err error) {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return false, "", nil
	}
	if strings.Contains(t.Name(), "/") {
		t.Fatalf("RunAlone runs a top-level test, not %s", t.Name())
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), childEnv+"="+t.Name()), env...)
	b, err := cmd.CombinedOutput()
	if err == nil && !strings.Contains(string(b), "--- PASS: "+t.Name()) {
		err = errors.New("the child process did not run " + t.Name())
	}
	return true, string(b), err
}

// InChild reports whether this process runs a test for its parent
// (RunAlone), so that what prepares a whole test process (a TestMain) can
// leave the child's state as a new process has it.
func InChild() bool { return os.Getenv(childEnv) != "" }
