#!/usr/bin/env bash
# Checks what `make test` needs before it runs, and fails with one line
# naming everything missing and how to get it. .ci/run installs all of it
# on a fresh Debian 12 machine.
set -uo pipefail
cd "${0%/*}/.." || exit 1

# TOOL DEBIAN-PACKAGE: every command the tests run (testenv.Tool calls and
# the disk image builders); fixtures/testenv's tests keep this list in step
# with the tests and with .ci/run.
tools="
systemctl systemd
systemd-analyze systemd
systemd-nspawn systemd-container
qemu-img qemu-utils
mke2fs e2fsprogs
e2fsck e2fsprogs
debugfs e2fsprogs
mkfs.xfs xfsprogs
xfs_db xfsprogs
xfs_repair xfsprogs
xfs_logprint xfsprogs
mkfs.btrfs btrfs-progs
cryptsetup cryptsetup-bin
mksquashfs squashfs-tools
mkntfs ntfs-3g
mdadm mdadm
btrfs btrfs-progs
sfdisk fdisk
sgdisk gdisk
pvcreate lvm2
vgcreate lvm2
lvcreate lvm2
zstd zstd
dbus-daemon dbus
chromium chromium
strace strace
skopeo skopeo
nsenter util-linux
unshare util-linux
mount mount
chroot coreutils
sh dash
dash dash
sed sed
git git
tar tar
gzip gzip
curl curl
"

PATH=$PATH:/usr/sbin:/sbin
missing=() pkgs=()
while read -r tool pkg; do
  [ -n "$tool" ] || continue
  if ! command -v "$tool" >/dev/null 2>&1; then
    missing+=("$tool")
    case " ${pkgs[*]} " in *" $pkg "*) ;; *) pkgs+=("$pkg") ;; esac
  fi
done <<<"$tools"
/usr/bin/python3 -c 'import pyvhdi' >/dev/null 2>&1 || { missing+=("pyvhdi"); pkgs+=("python3-libvhdi"); }
[ -f /etc/ssl/certs/ca-certificates.crt ] || { missing+=("the CA bundle"); pkgs+=("ca-certificates"); }
fc-list 2>/dev/null | grep -qi dejavu || [ -d /usr/share/fonts/truetype/dejavu ] || { missing+=("DejaVu fonts"); pkgs+=("fonts-dejavu-core"); }

problems=()
if [ ${#missing[@]} -gt 0 ]; then
  list=$(IFS=,; echo "${missing[*]}")
  problems+=("missing ${list//,/, } (apt-get install ${pkgs[*]})")
fi
for r in "AMILINT_DEBIAN_ROOT .cache/debian-root debian-root Debian 12 root" "AMILINT_TRIXIE_ROOT .cache/trixie-root trixie-root Debian 13 root" \
         "AMILINT_WIDE_ROOT .cache/wide-root wide-root Debian 12 root with the generator packages" \
         "AMILINT_WIDE_TRIXIE_ROOT .cache/wide-trixie-root wide-trixie-root Debian 13 root with the generator packages"; do
  read -r var dir target what <<<"$r"
  dir=${!var:-$dir}
  [ -x "$dir/lib/systemd/systemd" ] || problems+=("no $what at $dir (make $target)")
done
[ "$(id -u)" = 0 ] || problems+=("not root (the tests mount images, boot systemd in nspawn and make real cgroups: run as root)")

if [ ${#problems[@]} -gt 0 ]; then
  msg=$(IFS=';'; echo "${problems[*]}")
  msg=${msg//;/; }
  echo "make test: $msg — .ci/run installs all of it on Debian 12" >&2
  exit 1
fi
