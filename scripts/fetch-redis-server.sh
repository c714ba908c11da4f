#!/usr/bin/env bash
# Fetches a Redis or Valkey server from Debian's packages and unpacks it into a
# directory of its own, without touching the host's apt sources or installing
# anything on the host. Idempotent: a finished directory is reused.
#
# Usage: fetch-redis-server.sh SERVER     SERVER: redis:7.0 | redis:8.0 | valkey:8.1 | valkey:9.1
#
# The last line on stdout is the directory. It holds
#   root/           the unpacked packages: the server, its libraries and the
#                   dynamic loader of the Debian release it comes from
#   bin/NAME-server a wrapper that starts the server through that loader, so it
#                   runs on this machine whatever its own libc (give it to
#                   redlock-bench -spawn -server)
#   bin/NAME-sentinel the same in Sentinel mode
#   bin/NAME-cli    the same for the command-line client
#
# How: a private apt configuration (its own sources list, package lists and
# cache under the directory, passed with -o Dir::...) downloads the .debs of
# one Debian release (bookworm for 7.0, trixie for 8.0 and Valkey 8.1, sid for
# Valkey 9.1);
# dpkg-deb -x unpacks them. Debian's NAME-server is a symlink to
# NAME-check-rdb: the server picks its mode from its program name, so the
# wrapper passes --argv0 NAME-server. The script then checks that every
# library the server needs resolves inside root/ and that it reports the
# expected version.
#
# $REDLOCK_SERVERS_DIR sets where servers go (default ~/.cache/redlock/servers).
set -euo pipefail
log() { echo "fetch-redis-server: $*" >&2; }
server=${1:?usage: fetch-redis-server.sh redis:7.0|redis:8.0|valkey:8.1|valkey:9.1}

case "$server" in
redis:7.0) name=redis suite=bookworm ssl=libssl3 ;;
redis:8.0) name=redis suite=trixie ssl=libssl3t64 ;;
valkey:8.1) name=valkey suite=trixie ssl=libssl3t64 ;;
valkey:9.1) name=valkey suite=sid ssl=libssl3t64 ;;
*) log "unknown server $server: want redis:7.0, redis:8.0, valkey:8.1 or valkey:9.1"; exit 2 ;;
esac
want=${server#*:}
base=${REDLOCK_SERVERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/redlock/servers}
dir="$base/$name-$want"
if [ -f "$dir/.complete" ] && [ -x "$dir/bin/$name-sentinel" ]; then
	echo "$dir"
	exit 0
fi

rm -rf "$dir"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/debs" "$dir/root" "$dir/bin"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" >"$dir/apt/sources.list"
apt_opts=(
	-o "Dir::Etc::SourceList=$dir/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt/cache"
	-o Dir::State::status=/dev/null -o APT::Architecture=amd64
	-o APT::Sandbox::User=root -o Debug::NoLocking=1
)
log "$server: package lists of Debian $suite (private apt configuration in $dir/apt)"
apt-get "${apt_opts[@]}" -qq update >&2
# The server binary is in NAME-tools; NAME-server only holds the symlink. The
# libraries are what the binary and libssl link against.
pkgs=("$name-tools" libc6 libstdc++6 libgcc-s1 libatomic1 "$ssl" zlib1g libsystemd0 libjemalloc2 liblzf1
	libcap2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1)
log "$server: downloading ${pkgs[*]}"
(cd "$dir/debs" && apt-get "${apt_opts[@]}" -qq download "${pkgs[@]}" >&2)
for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
rm -rf "$dir/apt" "$dir/debs"

loader=$(find "$dir/root" -name 'ld-linux-x86-64.so.2' -type f | head -n 1)
[ -n "$loader" ] || { log "no dynamic loader in the unpacked packages"; exit 1; }
libs="$dir/root/lib/x86_64-linux-gnu:$dir/root/usr/lib/x86_64-linux-gnu"
for tool in server sentinel cli; do
	target=check-rdb
	[ "$tool" = cli ] && target=cli
	cat >"$dir/bin/$name-$tool" <<EOF
#!/bin/sh
# $server's $name-$tool from Debian $suite, through that release's own loader and libraries.
exec "$loader" --library-path "$libs" --argv0 $name-$tool "$dir/root/usr/bin/$name-$target" "\$@"
EOF
	chmod +x "$dir/bin/$name-$tool"
done

unresolved=$("$loader" --library-path "$libs" --list "$dir/root/usr/bin/$name-check-rdb" | grep -v -e "$dir/root" -e linux-vdso || true)
if [ -n "$unresolved" ]; then
	log "$server: libraries not found among the unpacked packages:"; echo "$unresolved" >&2; exit 1
fi
version=$("$dir/bin/$name-server" --version)
case "$version" in
*"v=$want."*) ;;
*) log "$server: the package holds '$version', not $want"; exit 1 ;;
esac
echo "$version" >"$dir/VERSION"
touch "$dir/.complete"
log "$server: $version in $dir"
echo "$dir"
