#!/usr/bin/env bash
# Builds a minimal Redis image from this machine's redis-server, for machines
# that cannot pull one: the real binary (Debian's /usr/bin/redis-server is a
# symlink, and Redis picks its mode from its program name, so the resolved file
# is copied to a path named redis-server), every library ldd lists, the dynamic
# loader, /data and /tmp. Usage: build-redis-image.sh IMAGE
set -euo pipefail
image=${1:?usage: build-redis-image.sh IMAGE}
bin=$(readlink -f "$(command -v redis-server || echo /usr/bin/redis-server)")
[ -x "$bin" ] || { echo "build-redis-image: redis-server not found (apt-get install redis-server)" >&2; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/local/bin" "$root/data" "$root/tmp"
chmod 1777 "$root/tmp"
cp "$bin" "$root/usr/local/bin/redis-server"
for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
echo "build-redis-image: $image from $bin ($("$root/usr/local/bin/redis-server" --version | grep -o "v=[0-9.]*"))" >&2
tar -C "$root" -c . | docker import \
	--change 'ENV PATH=/usr/local/bin' \
	--change 'WORKDIR /data' \
	--change 'CMD ["redis-server", "--protected-mode", "no"]' \
	- "$image" >/dev/null
