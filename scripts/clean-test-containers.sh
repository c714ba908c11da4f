#!/usr/bin/env bash
# Removes integration-test containers, minding other runs on the same Docker
# host: each run of the suite labels its containers with this checkout
# (redlock.test.checkout, a hash of the repository's path), the run
# (redlock.test.run) and the process that owns the run (redlock.test.pid);
# see test/integration/harness/labels.go.
#
#   clean-test-containers.sh --run RUN   this run's containers (at its end)
#   clean-test-containers.sh             this checkout's containers whose run's
#                                        process is gone (a crashed run), and
#                                        stopped ones from before the labels
#
# A live run, and every other checkout's containers, are left alone.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd -P)
checkout=${REDLOCK_TEST_CHECKOUT:-$(printf %s "$repo" | sha256sum | cut -c1-12)}

remove() {
	[ $# -eq 0 ] && return 0
	echo "clean-test-containers: removing $# container(s): $*"
	docker rm -f "$@" >/dev/null
}

if [ "${1:-}" = --run ]; then
	[ -n "${2:-}" ] || { echo "clean-test-containers: --run needs the run's id" >&2; exit 2; }
	# shellcheck disable=SC2046
	remove $(docker ps -aq --filter "label=redlock.test.run=$2")
	exit 0
fi
[ $# -eq 0 ] || { echo "usage: clean-test-containers.sh [--run RUN]" >&2; exit 2; }

orphans=()
while read -r id pid; do
	[ -n "$id" ] || continue
	if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
		orphans+=("$id")
	fi
done < <(docker ps -a --filter "label=redlock.test.checkout=$checkout" --format '{{.ID}} {{.Label "redlock.test.pid"}}')
# Containers from before the per-run labels: only the stopped ones, since
# a running one may belong to another checkout's live run.
while read -r id checkoutLabel; do
	[ -n "$id" ] && [ -z "$checkoutLabel" ] && orphans+=("$id")
done < <(docker ps -a --filter label=redlock.test=1 --filter status=exited --format '{{.ID}} {{.Label "redlock.test.checkout"}}')
remove "${orphans[@]+"${orphans[@]}"}"
