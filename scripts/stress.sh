#!/usr/bin/env bash
# Hunts flaky tests: runs the unit suite (both transports) UNIT times and the
# integration suite (on each server, and on Redis 7.0 over both transports) INTEGRATION times, each under the race
# detector while BURNERS CPU-burning processes run, and prints how often each
# test failed. Logs of failed runs stay in OUT. Not part of CI (it takes long);
# run it before and after touching anything timing-sensitive.
#
# Usage: scripts/stress.sh [UNIT] [INTEGRATION] [BURNERS]   (default 10 3 2)
# The integration runs need scripts/integration-setup.sh (run it first).
set -euo pipefail
cd "$(dirname "$0")/.."
unit=${1:-10} integration=${2:-3} burners=${3:-2}
out=${OUT:-$(mktemp -d /tmp/redlock-stress.XXXXXX)}
mkdir -p "$out"
echo "stress: $unit unit and $integration integration rounds, $burners CPU burners; logs in $out"

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
	local log="$out/$name.log"
	if (cd "$dir" && env "${envs[@]}" go test "$@") >"$log" 2>&1; then
		echo "stress: $name ok"; rm -f "$log"
	else
		echo "stress: $name FAILED: $(grep -E '^\s*--- FAIL' "$log" | sed 's/ (.*//' | tr -s ' ' | tr '\n' ' ')"
	fi
}

for i in $(seq 1 "$unit"); do
	run "unit-$i" . REDLOCK_TEST_TRANSPORT=auto -- -race -count=1 ./...
	run "unit-direct-$i" . REDLOCK_TEST_TRANSPORT=direct -- -race -count=1 ./redlock/
done
if [ "$integration" -gt 0 ]; then
	scripts/integration-setup.sh
	for i in $(seq 1 "$integration"); do
		# Every server and transport runs the whole suite here (CI runs subsets of two).
		for run in redis:7.0/auto-pipeline redis:7.0/direct redis:8.0/auto-pipeline valkey:8.1/auto-pipeline valkey:9.1/auto-pipeline; do
			server=${run%/*} transport=${run#*/}
			run "integration-${server/:/-}-$transport-$i" test/integration REDLOCK_TEST_SERVER="$server" \
				TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
				REDLOCK_TEST_TRANSPORT=$transport -- -race -count=1 -timeout 20m ./...
		done
	done
fi
echo "stress: failures per test:"
cat "$out"/*.log 2>/dev/null | grep -E '^\s*--- FAIL' | sed 's/ (.*//' | sed 's/^ *//' | sort | uniq -c | sort -rn || true
echo "stress: failed runs: $(ls "$out"/*.log 2>/dev/null | wc -l)"
