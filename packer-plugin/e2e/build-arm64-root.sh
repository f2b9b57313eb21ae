#!/usr/bin/env bash
# build-arm64-root.sh DIR: builds a Debian 12 arm64 root with openssh-server
# and systemd (debootstrap --arch=arm64 --variant=minbase) for the Packer end-to-end
# test of an arm64 guest: its sshd runs on this amd64 machine under
# qemu-user, so every command the plugin runs over SSH, `uname -m` included,
# runs as an aarch64 program. Both debootstrap stages run here through
# qemu-user-static registered with binfmt_misc.
#
# The root is built next to DIR and renamed into place only when complete,
# so a present DIR is a finished root and the script only (re)registers the
# emulator when it exists. Needs root, qemu-user-static and binfmt-support.
set -euo pipefail

dir=${1:?usage: build-arm64-root.sh DIR}
mkdir -p "$(dirname "$dir")"
dir=$(cd "$(dirname "$dir")" && pwd)/$(basename "$dir")
mirror=${DEBIAN_MIRROR:-}

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

if [ -x "$dir/usr/sbin/sshd" ]; then
  echo "arm64-root: $dir exists, not rebuilding (remove it to rebuild)"
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
echo "arm64-root: debootstrap --arch=arm64 bookworm from $mirror into $work"
debootstrap --arch=arm64 --variant=minbase --include=systemd,systemd-sysv,openssh-server bookworm "$work" "$mirror"
# The host keys debootstrap generated are part of a shared cache: the test
# brings its own.
rm -f "$work"/etc/ssh/ssh_host_*
arch=$(chroot "$work" uname -m)
if [ "$arch" != aarch64 ]; then
  echo "arm64-root: uname -m in the root says $arch, want aarch64" >&2
  exit 1
fi
mv "$work" "$dir"
trap - EXIT
echo "arm64-root: built $dir in $(( $(date +%s) - start ))s ($(du -sh "$dir" | cut -f1))"
