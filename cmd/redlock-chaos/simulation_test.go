package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"testing"
)

// The simulation in CI: the safe configuration over seeded schedules of
// every kind of fault, and every negative control until it shows its
// violation. Under the race detector a few schedules run instead (the
// detector makes it several times slower; the larger run goes without it,
// as scripts/test.sh has it). $REDLOCK_SIM_SEEDS sets the number.
func TestSimulation(t *testing.T) {
	debug.SetGCPercent(400) // bubbles allocate fast, and live little
	sc := simConfig{seeds: 100, first: 1, controls: true, artefacts: os.Getenv("REDLOCK_CHAOS_ARTIFACTS")}
	if raceEnabled || testing.Short() {
		sc.seeds, sc.controlSeeds, sc.exploratorySeeds = 4, 12, 2
	}
	if n, err := strconv.Atoi(os.Getenv("REDLOCK_SIM_SEEDS")); err == nil && n > 0 {
		sc.seeds = n
	}
	rep := runSimulation(t, sc, testWriter{t})
	if perSchedule := rep.faults / max(rep.schedules, 1); perSchedule < 5 {
		t.Errorf("%d faults per schedule: want at least 5", perSchedule)
	}
}
