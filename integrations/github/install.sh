#!/usr/bin/env bash
# Installs a released amilint, its checksum verified, for the GitHub
# Action (action.yml) and any CI that has bash, curl and tar.
#
#   AMILINT_VERSION   release tag, e.g. v0.1.0 (required)
#   AMILINT_DIR       where to put the binary (default: $RUNNER_TEMP/amilint/bin, else ./bin)
#   AMILINT_RELEASES  the releases' base URL (default https://github.com/amilint/amilint/releases;
#                     a file:// URL of a directory laid out as download/TAG/FILE works too)
#
# It downloads amilint_VERSION_OS_ARCH.tar.gz and amilint_VERSION_SHA256SUMS
# from the release, refuses the archive unless its SHA-256 is the one the
# SHA256SUMS file lists for it, and checks that the installed binary reports
# the version asked for. On GitHub it adds the directory to GITHUB_PATH and
# sets the step outputs path and version.
set -euo pipefail

fail() { echo "::error title=amilint install::$*" >&2; exit 1; }

version=${AMILINT_VERSION:-}
case "$version" in
  v[0-9]*.[0-9]*.[0-9]*) ;;
  "") fail "no version: set the action's version input (a release tag such as v0.1.0) or use the action at a release tag" ;;
  *) fail "version \"$version\": want a release tag such as v0.1.0" ;;
esac
num=${version#v}
base=${AMILINT_RELEASES:-https://github.com/amilint/amilint/releases}
dir=${AMILINT_DIR:-${RUNNER_TEMP:-.}/amilint/bin}

case "$(uname -s)" in
  Linux) os=linux ;;
  Darwin) os=darwin ;;
  *) fail "no amilint release for $(uname -s): releases are built for Linux and macOS" ;;
esac
case "$(uname -m)" in
  x86_64 | amd64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) fail "no amilint release for $(uname -m): releases are built for amd64 and arm64" ;;
esac

archive=amilint_${num}_${os}_${arch}.tar.gz
sums=amilint_${num}_SHA256SUMS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "$archive" "$sums"; do
  curl -fsSL --retry 3 --proto '=https,file' -o "$tmp/$f" "$base/download/$version/$f" ||
    fail "download $base/download/$version/$f failed"
done

want=$(awk -v f="$archive" '$2 == f || $2 == "*" f { print $1 }' "$tmp/$sums")
[ -n "$want" ] || fail "$sums lists no checksum for $archive"
if command -v sha256sum >/dev/null; then
  got=$(sha256sum "$tmp/$archive" | cut -d' ' -f1)
else
  got=$(shasum -a 256 "$tmp/$archive" | cut -d' ' -f1)
fi
[ "$got" = "$want" ] || fail "checksum mismatch for $archive: it hashes to $got, $sums says $want"

tar -xzf "$tmp/$archive" -C "$tmp" amilint || fail "$archive holds no amilint binary"
reported=$("$tmp/amilint" version) || fail "the amilint of $archive does not run here"
[ "$reported" = "amilint $version" ] || fail "the binary of $archive reports \"$reported\", not amilint $version"
mkdir -p "$dir"
install -m 0755 "$tmp/amilint" "$dir/amilint"

echo "installed amilint $version ($os/$arch, sha256 $got) in $dir"
if [ -n "${GITHUB_PATH:-}" ]; then echo "$dir" >>"$GITHUB_PATH"; fi
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  echo "path=$dir/amilint" >>"$GITHUB_OUTPUT"
  echo "version=$version" >>"$GITHUB_OUTPUT"
fi
