#!/usr/bin/env bash
# Runs every check and test of the repository: gofmt, go vet, and the unit
# and in-process tests under the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== go: $(go version)"
echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go vet ./..."
go vet ./...
echo "== go test -race ./..."
go test -race -count=1 ./...
echo "== all tests passed"
