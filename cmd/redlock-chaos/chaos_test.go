package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The short seeded runs CI makes on real servers (redis-server from PATH,
// or $REDLOCK_CHAOS_SERVER): the safe configuration must show no violation,
// and the unsafe one, the same schedule without fencing and without the
// node guard, must show some. Without the control, a clean safe run could
// mean only that the faults never bit.
//
// The schedule: a fault every 1.5 s on average over 60 s; the seed was
// chosen for a schedule with every kind of fault, among them several pauses
// past the lease (fencing's control) and several faults that strike a
// majority: crashes, flushes, restarts from old snapshots, eviction, clock
// steps and failovers to replicas behind (the node guard's controls). The hold (0.4 TTL) leaves a holder inside
// its lease long enough for the crashed majority to come back and grant
// the key again, which the guard's control needs.
var shortRun = []string{"-seed", "20261212", "-duration", "60s", "-fault-every", "1500ms", "-clients", "6", "-keys", "2", "-hold", "400ms"}

func TestShortChaosRuns(t *testing.T) {
	server := os.Getenv("REDLOCK_CHAOS_SERVER")
	if server == "" {
		server = "redis-server"
	}
	if _, err := exec.LookPath(server); err != nil {
		t.Fatalf("the chaos runs need a server: %v (scripts/integration-setup.sh installs redis-server)", err)
	}
	cfg, err := parseFlags(shortRun, discard{})
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, f := range plan(cfg) {
		kinds[f.Kind]++
	}
	for _, k := range faultKinds {
		require.Positive(t, kinds[k], "the seed's schedule has a %s", k)
	}
	require.GreaterOrEqual(t, kinds["pause"], 3, "the seed's schedule pauses clients")
	require.GreaterOrEqual(t, kinds["outage"], 3, "the seed's schedule crashes a majority")
	require.GreaterOrEqual(t, kinds["amnesia"], 3, "the seed's schedule flushes a majority")
	require.GreaterOrEqual(t, kinds["clockjump"], 2, "the seed's schedule steps a majority's clocks")
	require.GreaterOrEqual(t, kinds["failover"], 2, "the seed's schedule fails a majority over to replicas behind")

	for _, conf := range []string{"unsafe", "safe"} {
		t.Run(conf, func(t *testing.T) {
			// $REDLOCK_CHAOS_ARTIFACTS keeps the timelines and porcupine's
			// visualisation of a failing history after the test
			// (scripts/test.sh sets it); otherwise they go with the test.
			dir := t.TempDir()
			if keep := os.Getenv("REDLOCK_CHAOS_ARTIFACTS"); keep != "" {
				dir = filepath.Join(keep, conf)
				require.NoError(t, os.MkdirAll(dir, 0o755))
			}
			args := append(append([]string{}, shortRun...), "-config", conf, "-server", server,
				"-svg", filepath.Join(dir, "run.svg"), "-history", filepath.Join(dir, "history.html"))
			var out, progress bytes.Buffer
			err := run(t.Context(), append(args, "-json"), &out, &progress)
			t.Logf("%s", progress.String())
			var res result
			require.NoError(t, json.Unmarshal(out.Bytes(), &res), "the JSON result")
			res.write(testWriter{t}, config{})
			require.NoError(t, err, "the %s configuration's verdict", conf)
			require.Greater(t, res.Counts.Leases, 100)
			svg, err := os.ReadFile(filepath.Join(dir, "run.svg"))
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(string(svg), "<svg"))
			if conf == "safe" {
				// The guard must leave no two clients believing they
				// hold one lock: its quarantines cover every fault here,
				// clock steps included.
				assert.Zero(t, res.Counts.Overlaps, "overlapping leases with the node guard")
				return
			}
			// Each mechanism's control: the majority faults grant leases
			// twice without the guard, and the pauses get stale writes
			// accepted without fencing. The clock guard's control on its
			// own: a majority's clock step took a lease from its holder
			// in every trial of every run so far.
			assert.Positive(t, res.Counts.Overlaps, "overlapping leases without the node guard")
			assert.Positive(t, res.Counts.StaleAccepted, "stale writes accepted without fencing")
			assert.Positive(t, res.trialsOf("clockjump").Overlapped, "overlapping leases after clock steps without the clock guard")
			if res.Linearizable == "Illegal" {
				_, err := os.Stat(res.HistoryFile)
				assert.NoError(t, err, "porcupine's visualisation of the failing history")
			}
		})
	}
}

// testWriter writes to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
