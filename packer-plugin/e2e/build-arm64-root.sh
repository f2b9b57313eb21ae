#!/usr/bin/env bash
# build-arm64-root.sh DIR: builds a Debian 12 arm64 root with openssh-server
# and systemd (debootstrap --arch=arm64 --variant=minbase) for the Packer end-to-end
# test of an arm64 guest: its sshd runs on this amd64 machine under
# qemu-user, so every command the plugin runs over SSH, `uname -m` included,
# runs as an aarch64 program. Both debootstrap stages run here through
# qemu-user-static registered with binfmt_misc.
#
# The root is built next to DIR and renamed into place only when complete,
# with its recipe (suite, variant, packages) in DIR/.amilint-recipe: a DIR
# with the same recipe is reused as is (the script only registers the
# emulator), one with another recipe is rebuilt. Needs root,
# qemu-user-static and binfmt-support.
set -euo pipefail

dir=${1:?usage: build-arm64-root.sh DIR}
mkdir -p "$(dirname "$dir")"
dir=$(cd "$(dirname "$dir")" && pwd)/$(basename "$dir")
mirror=${DEBIAN_MIRROR:-}
suite=bookworm
variant=minbase
include=systemd,systemd-sysv,openssh-server
recipe="$suite $variant $include"

if [ "$(id -u)" != 0 ]; then
  echo "arm64-root: needs root (binfmt_misc, debootstrap)" >&2
  exit 2
fi
for tool in debootstrap update-binfmts qemu-aarch64-static; do
  command -v "$tool" >/dev/null || {
    echo "arm64-root: $tool is missing: apt-get install debootstrap binfmt-support qemu-user-static" >&2
    exit 2
  }
done

# Run arm64 ELF binaries through qemu-aarch64 (the registration lives in
# the kernel, so it is redone on every call; it is cheap and idempotent).
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
update-binfmts --enable qemu-aarch64 2>/dev/null || true
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] ||
   ! grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64; then
  echo "arm64-root: binfmt_misc has no enabled qemu-aarch64 entry" >&2
  exit 2
fi

if [ -x "$dir/usr/sbin/sshd" ] && [ "$(cat "$dir/.amilint-recipe" 2>/dev/null)" = "$recipe" ]; then
  echo "arm64-root: $dir ($recipe) exists, reused"
  exit 0
fi

# The mirror apt already uses on this machine (as fixtures/debian/build.sh).
if [ -z "$mirror" ]; then
  mirror=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null |
           grep -oE 'https?://[^ ]+/debian/?' | grep -v security | head -n1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi

work=$dir.partial
rm -rf "$work"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
echo "arm64-root: debootstrap --arch=arm64 $suite ($variant, $include) from $mirror into $work"
debootstrap --arch=arm64 --variant="$variant" --include="$include" "$suite" "$work" "$mirror"
# The host keys debootstrap generated are part of a shared cache: the test
# brings its own.
rm -f "$work"/etc/ssh/ssh_host_*
arch=$(chroot "$work" uname -m)
if [ "$arch" != aarch64 ]; then
  echo "arm64-root: uname -m in the root says $arch, want aarch64" >&2
  exit 1
fi
echo "$recipe" >"$work/.amilint-recipe"
# A root of another recipe is replaced.
rm -rf "$dir"
mv "$work" "$dir"
trap - EXIT
echo "arm64-root: built $dir in $(( $(date +%s) - start ))s ($(du -sh "$dir" | cut -f1))"
