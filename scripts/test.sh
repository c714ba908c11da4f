#!/usr/bin/env bash
# Runs every check and test of the repository: gofmt, go mod tidy, go vet, the unit and
# in-process tests under the race detector, and the integration tests on real
# Redis servers in Docker (scripts/integration-setup.sh installs and starts
# what they need). REDLOCK_SKIP_INTEGRATION=1 skips the latter, loudly; CI
# never sets it.
set -euo pipefail
cd "$(dirname "$0")/.."

# stage prints a stage's heading and the time the previous one took.
stage_name= stage_start=$SECONDS
stage() {
	[ -n "$stage_name" ] && echo "== ($stage_name: $((SECONDS - stage_start))s)"
	stage_name=$1 stage_start=$SECONDS
	echo "== $1"
}
# This run's containers carry its id (test/integration/harness/labels.go), so
# that the end of the run removes them and nothing of another run on the
# same Docker host (another checkout, a developer beside CI).
export REDLOCK_TEST_RUN="$(date +%s)-$$" REDLOCK_TEST_RUN_PID=$$
export REDLOCK_TEST_CHECKOUT=${REDLOCK_TEST_CHECKOUT:-$(printf %s "$(pwd -P)" | sha256sum | cut -c1-12)}
finish() {
	if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
		scripts/clean-test-containers.sh --run "$REDLOCK_TEST_RUN" || true
	fi
	[ -n "$stage_name" ] && echo "== ($stage_name: $((SECONDS - stage_start))s; $((SECONDS / 60))m$((SECONDS % 60))s in all)"
	[ -n "${test_logs:-}" ] && slowest && failures && rm -rf "$test_logs"
}
trap finish EXIT

# Every go test runs with -v into a log of its own in $test_logs, so that
# the end of the run can name the slowest tests (docs/testing.md keeps the
# suite within its budget by them); gotest prints a package's lines, and
# the whole log of a failing one, each line after the run's label (two runs
# may print side by side).
test_logs=$(mktemp -d)
gotest() {
	local label=$1 dir=$2
	shift 2
	local out="$test_logs/$label.log"
	if ! (cd "$dir" && go test -v "$@") >"$out" 2>&1; then
		grep -v -E 'pool.go|^=== ' "$out" | sed "s/^/[$label] /"
		return 1
	fi
	grep -E '^(ok|FAIL|--- FAIL)' "$out" | sed "s/^/[$label] /" || true
}
# slowest prints the 15 slowest top-level tests of the run, with the log
# (stage) they ran in.
slowest() {
	echo "== the 15 slowest tests of this run (seconds, test, run):"
	for f in "$test_logs"/*.log; do
		[ -e "$f" ] || continue
		sed -n -E "s|^--- (PASS\|FAIL): ([^ ]+) \(([0-9.]+)s\)\$|\3 \2 $(basename "$f" .log)|p" "$f"
	done | sort -rn | awk 'NR <= 15 { print "   " $0 }'
}

# failures prints, last of all (CI keeps the end of a long output), each
# failing test of the run with the lines its log printed just before its
# verdict, and any panic or data race with what follows it.
failures() {
	local f found=
	for f in "$test_logs"/*.log; do
		[ -e "$f" ] || continue
		grep -q -E -- '^\s*--- FAIL|^panic:|^WARNING: DATA RACE|^FAIL' "$f" || continue
		found=1
		echo "== failures in $(basename "$f" .log):"
		grep -v -E 'pool.go|^=== (RUN|PAUSE|CONT)' "$f" | grep -B 25 -A 2 -E -- '^\s*--- FAIL' | cut -c1-400 | tail -n 200
		grep -v 'pool.go' "$f" | grep -A 40 -E '^panic:|^WARNING: DATA RACE' | cut -c1-400 | head -n 120
	done
	[ -z "$found" ] || echo "== (the failures above, again, from the logs of this run)"
}

echo "== go: $(go version)"
stage "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
# The nested modules keep heavy dependencies out of the library's graph:
# cmd/redlock-bench (etcd, redsync), test/integration (Docker),
# cmd/redlock-chaos (porcupine), otel (OpenTelemetry). go.work ties them together.
modules="cmd/redlock-bench test/integration cmd/redlock-chaos otel"
stage "go mod tidy: nothing to change in any module"
go mod tidy -diff
for m in $modules; do (cd "$m" && go mod tidy -diff); done
stage "go vet"
go vet ./...
for m in $modules; do (cd "$m" && go vet ./...); done
# The CLI's default build leaves the etcd comparison and the OpenTelemetry
# variants out (cmd/redlock-bench/optional.go): vet them too.
(cd cmd/redlock-bench && go vet -tags etcd,otel ./...)
if [ "${REDLOCK_SKIP_INTEGRATION:-}" != 1 ]; then
	# First, so that redis-server is installed for the CLI's -spawn test too.
	stage "integration set-up: Docker and the server images"
	scripts/integration-setup.sh
	export TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
fi
# The coordinator has two transports: the auto-pipeline it gives *redis.Client
# nodes by default, and a goroutine and pooled connection per call
# (Options.NoAutoPipeline, and any other Node type). Test both. The second
# run is also the library's under Go's FIPS 140-3 "only" mode, where SHA-1
# panics: the library computes none on the client (scripts go by the digests
# servers name). One transport is enough for that mode (the digests are
# learned alike for both), and one run for both saves CI a stage. The two
# runs go side by side: the coordinator's tests wait on TTLs and networks
# far more than they compute (one run keeps this machine 40% busy).
stage "unit and in-process tests, go test -race ./..., beside the coordinator's over its direct transport in Go's FIPS 140-3 only mode: REDLOCK_TEST_TRANSPORT=direct GODEBUG=fips140=only go test -race ./redlock/... ./fence/"
# Each run has its share of the loopback ports for the servers it starts
# (internal/ports).
REDLOCK_TEST_PORT_SLOT=1/2 gotest unit . -race -count=1 ./... &
unit_pid=$!
REDLOCK_TEST_PORT_SLOT=2/2 REDLOCK_TEST_TRANSPORT=direct GODEBUG=fips140=only gotest direct-fips . -race -count=1 ./redlock/... ./fence/ &
fips_pid=$!
unit_ok=0 fips_ok=0
wait "$unit_pid" || unit_ok=$?
wait "$fips_pid" || fips_ok=$?
if [ "$unit_ok" != 0 ] || [ "$fips_ok" != 0 ]; then
	echo "== FAILED: $([ "$unit_ok" != 0 ] && echo "the unit tests ")$([ "$fips_ok" != 0 ] && echo "the direct transport's run in FIPS-only mode")"
	exit 1
fi
stage "fencing schedules, full set without the race detector's slowdown"
sched=$(mktemp)
if ! go test -count=1 -run 'TestFencingOrderUnderRandomSchedules' -v ./redlock/ >"$sched" 2>&1; then
	grep -v 'pool.go' "$sched"; mv "$sched" "$test_logs/fencing-schedules.log"; exit 1
fi
grep -E '^(--- |ok)|explored' "$sched"; mv "$sched" "$test_logs/fencing-schedules.log"
# The simulation: the real Locker against simulated nodes in virtual time
# (cmd/redlock-chaos/simulation.go), seeded schedules of every kind of
# fault in the safe configuration, and every negative control. No servers;
# without the race detector (the chaos stage runs a few schedules under it).
stage "simulation in virtual time: go test -run TestSimulation ./cmd/redlock-chaos/ (250 seeded schedules, at least 10,000 faults, and the controls)"
sim=$(mktemp)
# The controls' findings and any failing schedule's timeline (SVG) and
# report stay here after the run: CI's artefacts.
sim_artifacts=${TMPDIR:-/tmp}/redlock-sim-artifacts
rm -rf "$sim_artifacts"
echo "simulation artefacts (the controls' findings, failing schedules): $sim_artifacts"
if ! (cd cmd/redlock-chaos && REDLOCK_CHAOS_ARTIFACTS=$sim_artifacts go test -count=1 -run '^TestSimulation$' -v .) >"$sim" 2>&1; then
	grep -v -E 'pool.go|^=== |--- PASS' "$sim"; mv "$sim" "$test_logs/simulation.log"; exit 1
fi
grep -v -E 'pool.go|^=== |--- PASS|^\s*$' "$sim"; mv "$sim" "$test_logs/simulation.log"

cli_tests=(-race -count=1 -tags etcd,otel ./...) # the CLI's module; etcd members as child processes
otel_tests=(-race -count=1 ./...)                 # the adapter's module; in-memory SDK readers
if [ "${REDLOCK_SKIP_INTEGRATION:-}" = 1 ]; then
	stage "the benchmark CLI: go test ${cli_tests[*]} in cmd/redlock-bench"
	gotest bench-cli cmd/redlock-bench "${cli_tests[@]}"
	stage "the OpenTelemetry adapter: go test ${otel_tests[*]} in otel"
	gotest otel otel "${otel_tests[@]}"
	stage "the chaos referee's own tests (no servers): go test -race ./cmd/redlock-chaos/ -skip TestShortChaosRuns"
	gotest chaos-referee cmd/redlock-chaos -race -count=1 -skip TestShortChaosRuns ./...
	echo "== SKIPPED the integration tests and the chaos runs (REDLOCK_SKIP_INTEGRATION=1)"
	exit 0
fi
# The whole suite on Redis 7.0, Redis 8.0 and Valkey 9.1, over the
# auto-pipeline. The rolling upgrade starts its own mix of servers, so it
# runs once (on 7.0); Valkey 9's atomic slot migration starts Valkey 9.1
# processes, so it runs once (on 9.1). Two more runs take a subset, to keep
# CI within its budget (docs/testing.md gives each stage's time):
#   - the direct transport (Options.NoAutoPipeline) on Redis 7.0: what goes
#     through the coordinator's transport to standalone and Sentinel nodes
#     (faults, late replies, NOSCRIPT reruns, the guard's companions and
#     examinations, WAIT and WAITAOF, fencing, multi-key leases, wake-ups,
#     TLS). Cluster nodes take the direct transport in every run already;
#     what is the same over both (identity, operations, OpenTelemetry, the
#     quick start, ACL texts) is left to the full runs.
#   - Valkey 8.1, the older Valkey: what a server answers differently
#     (INFO fields the guard reads, a restart and its persistence, evictions,
#     ACL refusals, scripts and their declared keys, Sentinel, WAITAOF,
#     Redis Cluster as one node and a slot migration, fencing durability).
transport_subset='TestAcquireExtendRelease|TestMutualExclusionUnderContention|TestNodesDown|TestFrozenNodeDoesNotSlowCycles|TestLateRepliesLeaveNoKeys|TestScriptCacheLoss|TestCancelMidAcquireWithFrozenNodes|TestNodeRestartWhileHeld|TestPartitionAndKeyLoss|TestPausedHolderIsFencedOff|TestFencingDurability|TestDoCancelsWorkWhenNodesFreeze|TestNodeGuardOnRealServers|TestNodeGuardUnderLoad|TestGuardSeesANewProcessBehindEveryNodeKind|TestFailoverWithWaitReplicas|TestWaitAOF|TestMultiKeyContentionNeverDeadlocksNorOverlaps|TestResumedLeaseIsExtendedAndReleasedElsewhere|TestWaitersWakeAcrossLockers|TestKilledSubscriberFallsBackToPollingAndRecovers|TestTLSNodes|TestFirstLockOnTLSNodesBehindLatency'
server_subset='TestAcquireExtendRelease|TestScriptCacheLoss|TestNodeRestartWhileHeld|TestEveryScriptDeclaresItsKeysOnRealServers|TestNodeGuardOnRealServers|TestGuardSeesANewProcessBehindEveryNodeKind|TestFailedExaminationDoesNotVouchForANewProcess|TestEvictedMarkerQuarantinesTheNode|TestEvictionThatSparesTheMarkerQuarantinesTheNode|TestSnapshotRestartOfAReplicatedPrimaryIsQuarantined|TestFailoverWithWaitReplicas|TestWaitAOF|TestLeastPrivilegeACL|TestACLMissingOnePermission|TestACLWakeUps|TestTLSNodes|TestClusterAsOneNode|TestClusterSlotMigration|TestFencingDurability|TestPausedHolderIsFencedOff|TestDemotedPrimaryIsLeft'
once_on_9='TestClusterAtomicSlotMigration|TestAtomicSlotMoveMovesTheSlotAndItsKeys|TestClusterSlotHandedOverWithoutItsKeys'
# The runs go side by side with the other suites that wait on servers far
# more than they compute: the chaos runs (seeded faults on redis-server
# processes, a safe and an unsafe 60 s run), the benchmark CLI's tests and
# the OpenTelemetry adapter's. They take turns in $lanes lanes
# (REDLOCK_TEST_LANES, default 3; see docs/testing.md for the stage times
# with two and three): a lane that finishes a job takes the
# next of the list, longest first so that the lanes end close together
# (one whole integration run keeps this machine about a quarter busy).
# Each lane has its own share of the loopback ports (internal/ports), so
# that jobs side by side never pick the same port.
runs="redis:7.0/auto-pipeline/all redis:8.0/auto-pipeline/all valkey:9.1/auto-pipeline/all redis:7.0/direct/transport-subset valkey:8.1/auto-pipeline/server-subset"
jobs="$runs chaos bench-cli otel"
lanes=${REDLOCK_TEST_LANES:-3}
# names_of prints the test names a run selects (empty for all).
names_of() {
	case "$1" in
	transport-subset) echo "$transport_subset" ;;
	server-subset) echo "$server_subset" ;;
	esac
}
# log_of prints the log a job writes (each run's, and the other suites').
log_of() {
	local server transport tests
	case "$1" in
	*/*)
		IFS=/ read -r server transport tests <<<"$1"
		echo "$test_logs/integration-${server/:/-}-$transport-$tests.log"
		;;
	*) echo "$test_logs/$1.log" ;;
	esac
}
# run_job runs one job in lane $2 into its log; the log's last line says
# how it ended.
run_job() {
	local job=$1 lane=$2 log server transport tests names start=$SECONDS
	log=$(log_of "$job")
	local dir cmd=()
	case "$job" in
	*/*)
		IFS=/ read -r server transport tests <<<"$job"
		names=$(names_of "$tests")
		local select=()
		if [ -n "$names" ]; then
			select=(-run "^($names)\$")
		else
			local skip=$once_on_9
			[ "$server" = valkey:9.1 ] && skip=
			[ "$server" != redis:7.0 ] && skip=${skip:+$skip|}TestRollingUpgrade
			[ -n "$skip" ] && select=(-skip "^($skip)\$")
		fi
		dir=test/integration
		cmd=(env REDLOCK_TEST_SERVER="$server" REDLOCK_TEST_TRANSPORT="$transport" go test -race -count=1 -v -timeout 20m "${select[@]}" ./...)
		;;
	chaos) dir=cmd/redlock-chaos cmd=(env REDLOCK_CHAOS_ARTIFACTS="$artifacts" go test -race -count=1 -v ./...) ;;
	bench-cli) dir=cmd/redlock-bench cmd=(go test -v "${cli_tests[@]}") ;;
	otel) dir=otel cmd=(go test -v "${otel_tests[@]}") ;;
	esac
	echo "   start: $job: ${cmd[*]} in $dir (lane $lane of $lanes)"
	if (cd "$dir" && REDLOCK_TEST_PORT_SLOT=$lane/$lanes "${cmd[@]}") >"$log" 2>&1; then
		echo "== run ended: ok in $((SECONDS - start))s" >>"$log"
	else
		echo "== run ended: FAILED in $((SECONDS - start))s" >>"$log"
	fi
	echo "   end: $job: $(tail -n 1 "$log" | sed 's/^== run ended: //')"
}
# The chaos runs' timelines (SVG) and porcupine's visualisation of the
# unsafe run's history stay here after the run: CI's artefacts.
artifacts=${REDLOCK_CHAOS_ARTIFACTS:-${TMPDIR:-/tmp}/redlock-chaos-artifacts}
rm -rf "$artifacts"
stage "integration tests on every server and transport, the chaos runs, the CLI's and the OpenTelemetry adapter's tests: $lanes side by side"
echo "chaos artefacts (timelines, porcupine's history): $artifacts"
queue="$test_logs/queue"
printf '%s\n' $jobs >"$queue"
# take prints the next job of the queue and removes it, one lane at a time.
take() {
	flock "$queue.lock" bash -c 'head -n 1 "$1"; sed -i 1d "$1"' _ "$queue"
}
pids=()
for lane in $(seq 1 "$lanes"); do
	(
		while job=$(take) && [ -n "$job" ]; do
			run_job "$job" "$lane"
		done
	) &
	pids+=($!)
done
wait "${pids[@]}"
# Each job's report, in the list's order; the first failure ends the script.
for job in chaos bench-cli otel; do
	log=$(log_of "$job")
	echo "== $job: $(tail -n 1 "$log" | sed 's/^== run ended: //')"
	if ! tail -n 1 "$log" | grep -q '^== run ended: ok'; then
		grep -v -E 'pool.go|^=== ' "$log"
		echo "== $job FAILED"
		exit 1
	fi
	case "$job" in
	chaos) grep -E '^(--- |\s+--- |ok)|(seed [0-9]+, |leases granted|overlapping|stale accesses|increments lost|keys left|linearizable|trials|^\s+(freeze|kill|outage|amnesia|snapshot|rollback|partition|blackhole|latency|scriptflush|flush|evict|pressure|clockjump|failover|pause) +[0-9])' "$log" || true ;;
	*) grep -E '^(ok|FAIL|--- FAIL)' "$log" || true ;;
	esac
done
# Each run's report, in the list's order; the first failure ends the script.
for run in $runs; do
	IFS=/ read -r server transport tests <<<"$run"
	names=$(names_of "$tests")
	log=$(log_of "$run")
	echo "== integration tests ($tests) on $server, $transport transport: $(tail -n 1 "$log" | sed 's/^== run ended: //')"
	if ! tail -n 1 "$log" | grep -q '^== run ended: ok'; then
		grep -v -E 'pool.go|^=== (PAUSE|CONT)' "$log"
		echo "== integration tests FAILED ($server, $transport transport)"
		exit 1
	fi
	grep -E '^(=== RUN|--- |\s+--- |ok|PASS|FAIL|fenced acquisitions across the suite)|_test\.go:[0-9]+:' "$log" | grep -v '^=== RUN' || true
	if grep -q -- '--- SKIP' "$log"; then
		echo "== integration tests were skipped; that is a failure here"; exit 1
	fi
	# A subset names its tests: one renamed or removed must not drop out
	# of the run unnoticed.
	for name in ${names//|/ }; do
		if ! grep -q -- "^--- PASS: $name " "$log"; then
			echo "== the $tests names $name, which did not run; fix the list in scripts/test.sh"; exit 1
		fi
	done
	echo "== integration ($server, $transport): $(grep -c -- '^--- PASS' "$log") tests passed"
done
stage "done"
echo "== all tests passed"
