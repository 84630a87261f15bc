#!/usr/bin/env bash
# Builds the sokoshard container image without pulling anything: the release
# binary is built on this machine with cargo, then copied, with exactly the shared
# libraries `ldd` says it loads, into a root filesystem that deploy/Dockerfile
# adds to an empty (`scratch`) image.
#
#   deploy/build-image.sh [TAG]        (default tag: sokoshard:latest)
#
# Environment: CARGO_TARGET_DIR is honoured; SOKOSHARD_BINARY=PATH skips the
# cargo build and packs that binary instead (it must be built for this machine's
# libc, x86_64 or aarch64 Linux).
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-sokoshard:latest}

for tool in docker ldd; do
  command -v "$tool" >/dev/null || { echo "build-image: '$tool' is needed" >&2; exit 2; }
done

ctx=$(mktemp -d "${TMPDIR:-/tmp}/sokoshard-image.XXXXXX")
log=$(mktemp "${TMPDIR:-/tmp}/sokoshard-image-log.XXXXXX")
trap 'rm -rf "$ctx" "$log"' EXIT
root=$ctx/rootfs
mkdir -p "$root/usr/local/bin" "$root/usr/share/sokoshard" "$root/etc" "$ctx/data" "$ctx/tmp"

if [ -n "${SOKOSHARD_BINARY:-}" ]; then
  bin=$SOKOSHARD_BINARY
else
  echo "+ cargo build --release --locked --bin sokoshard" >&2
  cargo build --release --locked --bin sokoshard
  bin=${CARGO_TARGET_DIR:-target}/release/sokoshard
fi
# copy at once: the target directory may be shared with other builds
cp "$bin" "$root/usr/local/bin/sokoshard"
# debug info off, symbols kept (backtraces still name functions)
if command -v strip >/dev/null; then
  strip --strip-debug "$root/usr/local/bin/sokoshard"
fi

# the dynamic loader and every library the binary needs, at the same paths
libs=$(ldd "$root/usr/local/bin/sokoshard" | awk '
  /=> \// { print $3; next }   # libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)
  /^[[:space:]]*\// { print $1 }  # /lib64/ld-linux-x86-64.so.2 (0x...)
')
[ -n "$libs" ] || { echo "build-image: ldd found no libraries (a static binary needs none, but this build is not one)" >&2; exit 2; }
for lib in $libs; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done

# the shipped level collections, so a container can solve or submit them as is
cp levels/*.xsb levels/LICENSE "$root/usr/share/sokoshard/"
# names for the unprivileged user the image runs as
printf 'root:x:0:0:root:/:/sbin/nologin\nsokoshard:x:10001:10001:sokoshard:/data:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nsokoshard:x:10001:\n' >"$root/etc/group"
# /etc/hosts first (service names in compose land there or in Docker's DNS)
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
chmod 1777 "$ctx/tmp"

cp deploy/Dockerfile "$ctx/Dockerfile"
echo "+ docker build -t $tag (context: $(du -sh "$ctx" | cut -f1), libraries: $(echo "$libs" | wc -w))" >&2
# the legacy builder's deprecation notice is noise; show the log only on failure
if ! docker build -t "$tag" "$ctx" >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
docker image inspect "$tag" --format "built $tag: {{.Id}} {{.Size}} bytes" >&2
