package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/test/integration/harness"
)

// Two runs of the suite on one Docker host (two checkouts, or a developer
// and CI) leave each other's containers alone: scripts/clean-test-containers.sh,
// on this host's real Docker, removes at a run's end its own containers
// only, and at a run's start only what a crashed run of the same checkout
// left. The containers are created, never started, from a local image.
func TestContainerCleanupMindsOtherRunsOnTheDockerHost(t *testing.T) {
	out, err := exec.Command("docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "reference=redlock-test/*").Output()
	require.NoError(t, err, "docker images")
	images := strings.Fields(string(out))
	require.NotEmpty(t, images, "no redlock-test image: scripts/integration-setup.sh builds them")

	live := strconv.Itoa(os.Getpid())
	ended := exec.Command("true")
	require.NoError(t, ended.Run())
	gone := strconv.Itoa(ended.Process.Pid) // exited and reaped
	suffix := strconv.Itoa(os.Getpid())
	// Two checkouts, this test process's own: the suite's runs side by side
	// (scripts/test.sh) run this test at once, and one run's "a run starts"
	// must not remove another's crashed container of the same fake checkout.
	here, elsewhere := fmt.Sprintf("c0ffee%06x", os.Getpid()), fmt.Sprintf("c0ffef%06x", os.Getpid())
	create := func(name, checkout, run, pid string) string {
		t.Helper()
		id, err := exec.Command("docker", "create", "--name", "redlock-cleanup-"+name+"-"+suffix,
			"--label", harness.Label+"=1", "--label", harness.CheckoutLabel+"="+checkout,
			"--label", harness.RunLabel+"="+run+"-"+suffix, "--label", harness.PIDLabel+"="+pid, images[0]).Output()
		require.NoError(t, err, "docker create %s", name)
		t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", "redlock-cleanup-"+name+"-"+suffix).Run() })
		return strings.TrimSpace(string(id))
	}
	mine := create("mine", here, "r1", live)
	neighbour := create("neighbour", here, "r2", live) // another live run of this checkout
	otherCheckout := create("other-checkout", elsewhere, "r3", gone)
	crashed := create("crashed", here, "r4", gone)

	exists := func(id string) bool {
		return exec.Command("docker", "inspect", "--format", "{{.Id}}", id).Run() == nil
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "clean-test-containers.sh")
	clean := func(args ...string) {
		t.Helper()
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), "REDLOCK_TEST_CHECKOUT="+here)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		t.Logf("clean-test-containers.sh %s: %s", strings.Join(args, " "), strings.TrimSpace(string(out)))
	}

	clean("--run", "r1-"+suffix) // run r1 ends
	require.False(t, exists(mine), "the run's own container is removed")
	require.True(t, exists(neighbour), "a live run of the same checkout keeps its container")
	require.True(t, exists(otherCheckout), "another checkout's run keeps its container")
	require.True(t, exists(crashed))

	clean() // a run of this checkout starts
	require.False(t, exists(crashed), "a crashed run of this checkout: removed")
	require.True(t, exists(neighbour), "a live run of the same checkout keeps its container")
	require.True(t, exists(otherCheckout), "another checkout's containers are never this checkout's to remove, crashed or not")
}
