#!/usr/bin/env bash
# Hunts flaky tests: runs the unit suite (both transports) UNIT times and the
# integration suite (on each server, and on Redis 7.0 over both transports) INTEGRATION times, each under the race
# detector while BURNERS CPU-burning processes run, and prints how often each
# test failed. Logs of failed runs stay in OUT. Not part of CI (it takes long);
# run it before and after touching anything timing-sensitive.
#
# Usage: scripts/stress.sh [UNIT] [INTEGRATION] [BURNERS]   (default 10 3 2)
# The integration runs need scripts/integration-setup.sh (run it first).
#
# As CI does (scripts/test.sh), a unit round runs its two transports side by
# side, and the integration runs go in REDLOCK_TEST_LANES lanes (default 2
# here: the burners take the rest of the machine), each lane with its own
# share of the loopback ports. The default rounds take hours: with OUT set
# to the directory of an earlier invocation, the script skips the runs that
# invocation finished (OUT/done lists them) and goes on with the rest, so a
# stress campaign can be run in parts; the report at the end counts every
# part's failures.
set -euo pipefail
cd "$(dirname "$0")/.."
unit=${1:-10} integration=${2:-3} burners=${3:-2}
lanes=${REDLOCK_TEST_LANES:-2}
out=${OUT:-$(mktemp -d /tmp/redlock-stress.XXXXXX)}
mkdir -p "$out"
touch "$out/done"
echo "stress: $unit unit and $integration integration rounds, $burners CPU burners, $lanes integration lanes; logs in $out ($(wc -l <"$out/done") runs done before)"

pids=()
for _ in $(seq 1 "$burners"); do
	(while :; do :; done) &
	pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

run() { # name, dir, env..., -- go test args...
	local name=$1 dir=$2; shift 2
	local envs=()
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	if grep -qx "$name" "$out/done"; then
		return
	fi
	local log="$out/$name.log" start=$SECONDS
	if (cd "$dir" && env "${envs[@]}" go test "$@") >"$log" 2>&1; then
		echo "stress: $name ok ($((SECONDS - start))s)"; rm -f "$log"
	else
		echo "stress: $name FAILED ($((SECONDS - start))s): $(grep -E '^\s*--- FAIL' "$log" | sed 's/ (.*//' | tr -s ' ' | tr '\n' ' ')"
	fi
	echo "$name" >>"$out/done"
}

for i in $(seq 1 "$unit"); do
	run "unit-$i" . REDLOCK_TEST_TRANSPORT=auto REDLOCK_TEST_PORT_SLOT=1/2 -- -race -count=1 ./... &
	auto=$!
	run "unit-direct-$i" . REDLOCK_TEST_TRANSPORT=direct REDLOCK_TEST_PORT_SLOT=2/2 -- -race -count=1 ./redlock/... &
	wait "$auto" $!
done
if [ "$integration" -gt 0 ]; then
	scripts/integration-setup.sh
	# Every server and transport runs the whole suite here (CI runs subsets
	# of two); lane k takes runs k, k+lanes, ... in turn.
	jobs=()
	for i in $(seq 1 "$integration"); do
		for r in redis:7.0/auto-pipeline redis:7.0/direct redis:8.0/auto-pipeline valkey:8.1/auto-pipeline valkey:9.1/auto-pipeline; do
			jobs+=("$r/$i")
		done
	done
	lane_pids=()
	for lane in $(seq 1 "$lanes"); do
		(
			for j in $(seq $((lane - 1)) "$lanes" $((${#jobs[@]} - 1))); do
				IFS=/ read -r server transport i <<<"${jobs[$j]}"
				run "integration-${server/:/-}-$transport-$i" test/integration REDLOCK_TEST_SERVER="$server" \
					TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
					REDLOCK_TEST_TRANSPORT="$transport" REDLOCK_TEST_PORT_SLOT="$lane/$lanes" -- -race -count=1 -timeout 30m ./...
			done
		) &
		lane_pids+=($!)
	done
	wait "${lane_pids[@]}"
fi
echo "stress: failures per test:"
cat "$out"/*.log 2>/dev/null | grep -E '^\s*--- FAIL' | sed 's/ (.*//' | sed 's/^ *//' | sort | uniq -c | sort -rn || true
echo "stress: failed runs: $(ls "$out"/*.log 2>/dev/null | wc -l) of $(wc -l <"$out/done")"
