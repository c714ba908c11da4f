#!/usr/bin/env bash
# Makes the Docker image redlock-test/SERVER for the integration tests,
# idempotently: an image of that name that exists already is kept. The image
# is pulled from a public registry where one answers (redis:7.0, redis:8.0,
# valkey/valkey:8.1, valkey/valkey:9.1) and otherwise built offline from Debian's packages, which
# scripts/fetch-redis-server.sh fetches and unpacks: the unpacked tree is the
# image's root, so the loader and libraries simply sit at their usual paths.
#
# Usage: build-redis-image.sh SERVER     SERVER: redis:7.0 | redis:8.0 | valkey:8.1 | valkey:9.1
#
# In the image, NAME-server and NAME-cli are on PATH (NAME: redis or valkey);
# the working directory is /data. The last line on stdout is the image.
set -euo pipefail
log() { echo "build-redis-image: $*" >&2; }
here=$(cd "$(dirname "$0")" && pwd)
server=${1:?usage: build-redis-image.sh redis:7.0|redis:8.0|valkey:8.1|valkey:9.1}
name=${server%%:*}
image="redlock-test/$server"

if docker image inspect "$image" >/dev/null 2>&1; then
	log "$image exists"
	echo "$image"
	exit 0
fi

public=$server
[ "$name" = valkey ] && public="valkey/valkey:${server#*:}"
if timeout 30 docker pull -q "$public" >/dev/null 2>&1; then
	docker tag "$public" "$image"
	log "$image: pulled $public"
	echo "$image"
	exit 0
fi

dir=$("$here/fetch-redis-server.sh" "$server" | tail -n 1)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cp -a "$dir/root/." "$root/"
# Debian trixie keeps its libraries under /usr only (the merged /usr that
# base-files, not libc6, completes with these links); binaries ask for
# /lib64/ld-linux-x86-64.so.2.
for d in lib lib64; do
	if [ ! -e "$root/$d" ] && [ -d "$root/usr/$d" ]; then ln -s "usr/$d" "$root/$d"; fi
done
mkdir -p "$root/data" "$root/tmp" "$root/usr/local/bin"
chmod 1777 "$root/tmp"
# The server picks its mode from its program name: NAME-server must be a name
# for NAME-check-rdb (as Debian's NAME-server package links it).
ln -sf "/usr/bin/$name-check-rdb" "$root/usr/local/bin/$name-server"
ln -sf "/usr/bin/$name-cli" "$root/usr/local/bin/$name-cli"
version=$(cat "$dir/VERSION")
log "$image: building from Debian's packages ($version)"
tar -C "$root" -c . | docker import \
	--change 'ENV PATH=/usr/local/bin:/usr/bin' \
	--change 'WORKDIR /data' \
	--change "LABEL redlock.server=$server" \
	--change "CMD [\"$name-server\", \"--protected-mode\", \"no\"]" \
	- "$image" >/dev/null
# The image must run: a server that starts and reports its version.
docker run --rm "$image" "$name-server" --version >&2
echo "$image"
