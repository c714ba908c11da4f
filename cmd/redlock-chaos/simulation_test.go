package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// The simulation in CI: the safe configuration over hundreds of seeded
// schedules of every kind of fault (at least 10,000 faults carried out),
// and every negative control until it shows its violation. Under the race
// detector a few schedules run instead (the detector makes it several
// times slower; the full run goes without it, as scripts/test.sh has it).
func TestSimulation(t *testing.T) {
	debug.SetGCPercent(400) // bubbles allocate fast, and live little
	sc := simConfig{seeds: 360, first: 1, controls: true, artefacts: os.Getenv("REDLOCK_CHAOS_ARTIFACTS")}
	if raceEnabled || testing.Short() {
		sc.seeds = 6
	}
	rep := runSimulation(t, sc, testWriter{t})
	if !raceEnabled && !testing.Short() && rep.faults < 10000 {
		t.Errorf("%d faults carried out: the simulation must run at least 10,000 per CI run", rep.faults)
	}
}
