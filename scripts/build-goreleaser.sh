#!/usr/bin/env bash
# build-goreleaser.sh OUT VERSION: builds GoReleaser VERSION from the Go
# module proxy into OUT (skipped when OUT already holds it).
set -euo pipefail
out=$1
version=$2
if [ -x "$out" ] && "$out" --version 2>/dev/null | grep -qE "GitVersion: +v?${version#v}$"; then exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$out")"
GOBIN=$work GOFLAGS='' go install "github.com/goreleaser/goreleaser/v2@$version"
mv "$work/goreleaser" "$out"
