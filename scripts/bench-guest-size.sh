#!/usr/bin/env bash
# bench-guest-size.sh: the size of the guest build of amilint (the binary the
# Packer plugin uploads into every guest, built by packer-plugin/guest/mkguest
# exactly as the release embeds it) against the full binary, both stripped as
# released, on linux/amd64 and linux/arm64.
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd packer-plugin && go run ./guest/mkguest -raw -out "$work" >/dev/null)
for arch in amd64 arm64; do
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags '-s -w' -o "$work/full_$arch" ./cmd/amilint
  full=$(stat -c %s "$work/full_$arch")
  guest=$(stat -c %s "$work/amilint_linux_$arch")
  awk -v f="$full" -v g="$guest" -v arch="$arch" 'BEGIN {
    printf "guest binary linux/%s (stripped): %.2f MB, full binary %.2f MB: %.2fx the full size (goal: <= 25 MB, %s)\n",
      arch, g/1e6, f/1e6, g/f, (g <= 25e6 ? "met" : "NOT MET") }'
done
