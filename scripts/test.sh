#!/usr/bin/env bash
# Runs every check and test of the repository: gofmt, go vet, the unit and
# in-process tests under the race detector, and the integration tests on real
# Redis servers in Docker (scripts/integration-setup.sh installs and starts
# what they need). REDLOCK_SKIP_INTEGRATION=1 skips the latter, loudly; CI
# never sets it.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== go: $(go version)"
echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go vet"
go vet ./...
(cd test/integration && go vet ./...)
if [ "${REDLOCK_SKIP_INTEGRATION:-}" != 1 ]; then
	# First, so that redis-server is installed for the CLI's -spawn test too.
	echo "== integration set-up"
	REDLOCK_TEST_IMAGE=$(scripts/integration-setup.sh | tail -n 1)
	export REDLOCK_TEST_IMAGE TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
fi
echo "== unit and in-process tests: go test -race ./..."
go test -race -count=1 ./...
echo "== fencing schedules, full set without the race detector's slowdown"
sched=$(mktemp)
if ! go test -count=1 -run 'TestFencingOrderUnderRandomSchedules' -v ./redlock/ >"$sched" 2>&1; then
	grep -v 'pool.go' "$sched"; rm -f "$sched"; exit 1
fi
grep -E '^(--- |ok)|explored' "$sched"; rm -f "$sched"

if [ "${REDLOCK_SKIP_INTEGRATION:-}" = 1 ]; then
	echo "== SKIPPED the integration tests (REDLOCK_SKIP_INTEGRATION=1)"
	exit 0
fi
echo "== integration tests on real Redis containers ($REDLOCK_TEST_IMAGE): go test -race ./test/integration/..."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
if ! (cd test/integration && go test -race -count=1 -v -timeout 20m ./...) >"$log" 2>&1; then
	cat "$log"
	echo "== integration tests FAILED"
	exit 1
fi
grep -E '^(=== RUN|--- |\s+--- |ok|PASS|FAIL)|_test\.go:[0-9]+:' "$log" | grep -v '^=== RUN' || true
if grep -q -- '--- SKIP' "$log"; then
	echo "== integration tests were skipped; that is a failure here"; exit 1
fi
echo "== integration: $(grep -c -- '^--- PASS' "$log") tests passed in $((SECONDS - start))s"
echo "== all tests passed"
