#!/bin/sh
# fuzz-target.sh GO MODULE_DIR PACKAGE TARGET FUZZTIME
#
# Runs one fuzz target for FUZZTIME (make fuzz calls it for every target)
# and prints go test's output. It fails when go test fails, with one
# exception: a run that wrote no failing input and says only "context
# deadline exceeded" is Go's fuzzing coordinator racing its own -fuzztime
# deadline (go.dev/issue/75804, fixed in Go 1.27), not a failing input.
# That run is made again, once; a second failure of any kind fails.
set -u
go=$1 mod=$2 pkg=$3 target=$4 fuzztime=$5

dir=$(cd "$mod" && GOFLAGS=-mod=mod "$go" list -f '{{.Dir}}' "$pkg") || exit 1
corpus=$dir/testdata/fuzz/$target

for try in 1 2; do
	before=$(ls "$corpus" 2>/dev/null)
	if out=$(cd "$mod" && GOFLAGS=-mod=mod "$go" test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" -fuzzminimizetime 5s "$pkg" 2>&1); then
		printf '%s\n' "$out"
		exit 0
	fi
	after=$(ls "$corpus" 2>/dev/null)
	if [ "$try" = 1 ] && [ "$before" = "$after" ] &&
		printf '%s\n' "$out" | grep -q '^    context deadline exceeded$' &&
		! printf '%s\n' "$out" | grep -q -e 'Failing input written' -e 'failure while testing seed corpus' -e '^panic:'; then
		echo "fuzz-target.sh: $pkg $target: no input failed; Go's fuzzing coordinator missed its own -fuzztime deadline (go.dev/issue/75804): running it again" >&2
		continue
	fi
	printf '%s\n' "$out"
	exit 1
done
