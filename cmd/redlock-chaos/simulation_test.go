package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The simulation in CI: the safe configuration over 250 seeded schedules
// of every kind of fault (at least 10,000 faults carried out), and every
// negative control until it shows its violation. Under the race detector a
// few schedules run instead (the detector makes it several times slower;
// the full run goes without it, as scripts/test.sh has it).
// $REDLOCK_SIM_SEEDS sets the number of schedules.
func TestSimulation(t *testing.T) {
	debug.SetGCPercent(400) // bubbles allocate fast, and live little
	sc := simConfig{seeds: 250, first: 1, controls: true, artefacts: os.Getenv("REDLOCK_CHAOS_ARTIFACTS")}
	full := !raceEnabled && !testing.Short()
	if !full {
		sc.seeds, sc.controlSeeds = 4, 20
	}
	if n, err := strconv.Atoi(os.Getenv("REDLOCK_SIM_SEEDS")); err == nil && n > 0 {
		sc.seeds, full = n, false
	}
	rep := runSimulation(t, sc, testWriter{t})
	if perSchedule := rep.faults / max(rep.schedules, 1); perSchedule < 5 {
		t.Errorf("%d faults per schedule: want at least 5", perSchedule)
	}
	if rep.multiKey == 0 || rep.do == 0 || rep.extended == 0 {
		t.Errorf("leases of every shape: %d of two keys at once, %d under Do, %d of those extended; want some of each", rep.multiKey, rep.do, rep.extended)
	}
	if full && rep.faults < 10000 {
		t.Errorf("%d faults carried out: CI's run must carry out at least 10,000", rep.faults)
	}
}

// The command's -sim runs the simulation through testing.MainStart, which
// the Go 1 promise does not cover: build the command and run it, so that a
// Go release that changes it fails here.
func TestSimulationFromTheCommand(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "redlock-chaos")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "-sim", "-seeds", "2", "-seed", "5", "-controls=false", "-artifacts", dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	assert.Contains(t, stdout.String(), "simulation: 2 schedules in the safe configuration (seeds 5 to 6)")
	assert.Contains(t, stdout.String(), "violations in the safe configuration: 0 schedules")
	assert.Contains(t, stderr.String(), "simulating from seed 5")
}

// Each simulated connection holds two descriptors (its probe); a schedule
// opens hundreds, and a long -sim run thousands of schedules: none may
// outlive its schedule.
func TestSimulatedScheduleLeavesNoDescriptors(t *testing.T) {
	open := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(entries)
	}
	before := open()
	res, err := simulate(t, scheduleConfig(3, simVariants[0]))
	require.NoError(t, err)
	require.Positive(t, res.Counts.Leases)
	assert.LessOrEqual(t, open(), before+2, "descriptors left open by a schedule (its connections' probes)")
}
