package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeDocker is a docker command first on PATH that logs its arguments
// and answers ps from fixtures, as the Docker host would after applying
// the filter: run (one run's containers), checkout (this checkout's, "ID
// PID"), legacy (stopped containers from before the per-run labels).
type fakeDocker struct {
	dir string
}

func newFakeDocker(t *testing.T, fixtures map[string]string) *fakeDocker {
	t.Helper()
	dir := t.TempDir()
	for name, text := range fixtures {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	script := `#!/bin/sh
echo "$*" >> "` + dir + `/log"
[ "$1" = ps ] || exit 0
case "$*" in
*redlock.test.run=*) cat "` + dir + `/run" 2>/dev/null ;;
*redlock.test.checkout=*) cat "` + dir + `/checkout" 2>/dev/null ;;
*status=exited*) cat "` + dir + `/legacy" 2>/dev/null ;;
esac
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "docker"), []byte(script), 0o755))
	return &fakeDocker{dir: dir}
}

// clean runs scripts/clean-test-containers.sh with args and the fake
// docker, and returns the docker commands it ran.
func (f *fakeDocker) clean(t *testing.T, env []string, args ...string) []string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "clean-test-containers.sh")
	cmd := exec.Command(script, args...)
	cmd.Env = append(os.Environ(), "PATH="+f.dir+":"+os.Getenv("PATH"), "REDLOCK_TEST_CHECKOUT=")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	log, _ := os.ReadFile(filepath.Join(f.dir, "log"))
	return strings.Split(strings.TrimSpace(string(log)), "\n")
}

// removed is what the docker commands removed.
func removed(cmds []string) []string {
	var out []string
	for _, c := range cmds {
		if rest, ok := strings.CutPrefix(c, "rm -f "); ok {
			out = append(out, strings.Fields(rest)...)
		}
	}
	return out
}

func TestCleanupRemovesOnlyThisRunsContainers(t *testing.T) {
	f := newFakeDocker(t, map[string]string{"run": "aaa\nbbb\n"})
	cmds := f.clean(t, nil, "--run", "1700000000-42")
	require.Contains(t, cmds[0], "label=redlock.test.run=1700000000-42", "asks for this run's containers alone")
	require.Equal(t, []string{"aaa", "bbb"}, removed(cmds))
}

func TestCleanupRemovesACrashedRunOfThisCheckoutAndNothingLive(t *testing.T) {
	live := strconv.Itoa(os.Getpid()) // this test's process: alive
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	gone := strconv.Itoa(dead.Process.Pid) // exited and reaped
	f := newFakeDocker(t, map[string]string{
		"checkout": "c-live " + live + "\nc-crashed " + gone + "\nc-unlabelled \n",
		"legacy":   "l-old \nl-other-checkout 0123456789ab\n",
	})
	cmds := f.clean(t, nil)
	require.Contains(t, cmds[0], "label="+CheckoutLabel+"="+Checkout(), "asks for this checkout's containers, named as the harness names it")
	require.ElementsMatch(t, []string{"c-crashed", "c-unlabelled", "l-old"}, removed(cmds),
		"a live run's container, and another checkout's, stay")
}

func TestContainerLabelsNameTheRun(t *testing.T) {
	t.Setenv("REDLOCK_TEST_RUN", "r1")
	t.Setenv("REDLOCK_TEST_RUN_PID", "123")
	t.Setenv("REDLOCK_TEST_CHECKOUT", "")
	l := containerLabels()
	require.Equal(t, map[string]string{Label: "1", CheckoutLabel: Checkout(), RunLabel: "r1", PIDLabel: "123"}, l)
	require.Len(t, Checkout(), 12)
}
