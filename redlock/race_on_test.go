//go:build race

package redlock_test

// raceEnabled: the race detector slows everything several times over, so
// timing-driven schedule tests scale their clocks and shorten their runs.
const raceEnabled = true
