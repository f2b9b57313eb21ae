#!/usr/bin/env bash
# build-packer.sh OUT: builds Packer v1.14.3 from the Go module proxy into OUT
# (skipped when OUT already holds it). `go install packer@v1.14.3` does not
# work here because the module's version list is not served, so a throwaway
# module requires it with the go-cty replace the SDK needs.
set -euo pipefail
out=$1
version=1.14.3
if [ -x "$out" ] && "$out" version 2>/dev/null | grep -q "v$version"; then exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/go.mod" <<MOD
module packerbuild

go 1.26

require github.com/hashicorp/packer v$version

replace github.com/zclconf/go-cty => github.com/nywilken/go-cty v1.13.3
MOD
printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/hashicorp/packer"\n' > "$work/tools.go"
cd "$work"
export GONOSUMDB=github.com/hashicorp/packer GOFLAGS=-mod=mod
go mod tidy
mkdir -p "$(dirname "$out")"
go build -o "$out.tmp" github.com/hashicorp/packer
mv "$out.tmp" "$out"
