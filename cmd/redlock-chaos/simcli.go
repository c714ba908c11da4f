package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// runSim is -sim: the simulation from the command line. testing/synctest
// makes a bubble only for a *testing.T, so the command runs the simulation
// as the one test of its own binary, through testing.MainStart, the entry
// point `go test` generates a call to. MainStart is exempt from the Go 1
// compatibility promise: TestSimulationFromTheCommand builds this command
// and runs -sim, so that a change in it fails CI rather than a user.
//
// With -models it runs each kind of fault alone, unsafe then safe, as the
// real runs' -models does, for the agreement table of
// docs/failure-models.md.
func runSim(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	tests := []testing.InternalTest{{Name: "Simulation", F: func(t *testing.T) {
		if !cfg.models {
			runSimulation(t, *cfg.simRun, stdout)
			return
		}
		if err := runModels(ctx, cfg, stdout, stderr, simRunner(t)); err != nil {
			t.Error(err)
		}
	}}}
	m := testing.MainStart(simDeps{}, tests, nil, nil, nil)
	// The testing package's own flags (MainStart registered them): this
	// test alone, no time limit (-seeds decides the length).
	if err := flag.CommandLine.Parse([]string{"-test.run=^Simulation$", "-test.timeout=0"}); err != nil {
		return err
	}
	if m.Run() != 0 {
		return errors.New("the simulation failed (see above)")
	}
	return nil
}

// simRunner runs a configuration simulated, in a bubble of t's: -models's
// runs, with the simulation's resource (a Redis counter).
func simRunner(t *testing.T) runner {
	return func(_ context.Context, cfg config, progress io.Writer) (*result, error) {
		cfg.resource = "redis"
		res, err := simulate(t, cfg)
		if err == nil {
			fmt.Fprintf(progress, "redlock-chaos: simulated %s, %s configuration, seed %d: %d leases, %d faults\n",
				strings.Join(cfg.faults, ","), configName(cfg), cfg.seed, res.Counts.Leases, len(res.Faults))
		}
		return res, err
	}
}

// simDeps is what testing.M asks of the binary that runs it: a test
// binary's profiling, coverage and fuzzing hooks, none of which the
// simulation uses.
type simDeps struct{}

type simCorpusEntry = struct {
	Parent     string
	Path       string
	Data       []byte
	Values     []any
	Generation int
	IsSeed     bool
}

func (simDeps) ImportPath() string { return "github.com/redlock/redlock/cmd/redlock-chaos" }
func (simDeps) ModulePath() string { return "github.com/redlock/redlock/cmd/redlock-chaos" }
func (simDeps) MatchString(pat, str string) (bool, error) {
	return regexp.MatchString(pat, str)
}
func (simDeps) SetPanicOnExit0(bool)                        {}
func (simDeps) StartCPUProfile(io.Writer) error             { return nil }
func (simDeps) StopCPUProfile()                             {}
func (simDeps) StartTestLog(io.Writer)                      {}
func (simDeps) StopTestLog() error                          { return nil }
func (simDeps) WriteProfileTo(string, io.Writer, int) error { return nil }
func (simDeps) CoordinateFuzzing(time.Duration, int64, time.Duration, int64, int, []simCorpusEntry, []reflect.Type, string, string) error {
	return errors.New("no fuzzing here")
}
func (simDeps) RunFuzzWorker(func(simCorpusEntry) error) error { return errors.New("no fuzzing here") }
func (simDeps) ReadCorpus(string, []reflect.Type) ([]simCorpusEntry, error) {
	return nil, errors.New("no fuzzing here")
}
func (simDeps) CheckCorpus([]any, []reflect.Type) error { return nil }
func (simDeps) ResetCoverage()                          {}
func (simDeps) SnapshotCoverage()                       {}
func (simDeps) InitRuntimeCoverage() (string, func(string, string) (string, error), func() float64) {
	return "", nil, nil
}
