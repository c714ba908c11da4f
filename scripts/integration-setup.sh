#!/usr/bin/env bash
# Makes this machine ready for the integration tests, idempotently: installs
# docker.io, redis-server and gcc (the chaos run's clock shim) if missing (as root, with apt-get), starts dockerd
# if no daemon answers, removes containers left by an earlier crashed run, and
# pulls or builds the image of every server the tests run on: redlock-test/redis:7.0,
# redlock-test/redis:8.0, redlock-test/valkey:8.1 and redlock-test/valkey:9.1
# ($REDLOCK_TEST_SERVERS chooses others among these). Logs go to stderr.
set -euo pipefail
log() { echo "integration-setup: $*" >&2; }
here=$(cd "$(dirname "$0")" && pwd)

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else
		log "need root to run: $* (run as root, or install and start Docker yourself)"; exit 1
	fi
}

missing=()
command -v docker >/dev/null || missing+=(docker.io)
command -v dockerd >/dev/null || missing+=(docker.io)
[ -e /usr/bin/redis-server ] || command -v redis-server >/dev/null || missing+=(redis-server)
# The chaos run's clockjump fault builds a small preloaded clock shim.
command -v cc >/dev/null || missing+=(gcc)
if [ ${#missing[@]} -gt 0 ]; then
	pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
	log "installing $pkgs"
	as_root apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq $pkgs >&2
fi

if ! docker info >/dev/null 2>&1; then
	if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
		log "removing stale /var/run/docker.pid"
		as_root rm -f /var/run/docker.pid
	fi
	if ! pgrep -x dockerd >/dev/null; then
		log "starting dockerd (log: /tmp/dockerd.log)"
		as_root setsid dockerd >/tmp/dockerd.log 2>&1 < /dev/null &
	fi
	for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
	docker info >/dev/null 2>&1 || { log "dockerd did not come up; see /tmp/dockerd.log"; tail -20 /tmp/dockerd.log >&2 || true; exit 1; }
fi
log "docker $(docker version --format '{{.Server.Version}}') is up"

# What a crashed run of this checkout left; never another checkout's or a
# live run's containers (scripts/clean-test-containers.sh).
"$here/clean-test-containers.sh"

# One image per server the suite runs on (scripts/build-redis-image.sh pulls it
# or builds it offline from Debian's packages).
# The replication, Sentinel and cluster tests run the servers as plain
# processes (every address they announce is 127.0.0.1): fetch them too.
for server in ${REDLOCK_TEST_SERVERS:-redis:7.0 redis:8.0 valkey:8.1 valkey:9.1}; do
	"$here/build-redis-image.sh" "$server" >/dev/null
	"$here/fetch-redis-server.sh" "$server" >/dev/null
done
log "images: $(docker images --format '{{.Repository}}:{{.Tag}}' 'redlock-test/*' | sort | tr '\n' ' ')"
