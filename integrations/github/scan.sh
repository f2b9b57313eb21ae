#!/usr/bin/env bash
# The action's scan step: amilint scan TARGET -o sarif, with the exit code
# kept for the gate step instead of failing here, so the SARIF is uploaded
# before the job fails.
#
#   AMILINT_TARGET      what to scan: a directory, tarball, disk image, ami:…, ebs:…
#   AMILINT_FAIL_ON     severity at or above which the job fails (default high)
#   AMILINT_ARGS        more scan flags, split on spaces (e.g. --profile k8s-gpu-node)
#   AMILINT_OUTPUT_DIR  where the SARIF report goes (default amilint-report)
#   AMILINT             the amilint binary (default: amilint on PATH)
#
# Exit 0 when the scan ran (outputs exit-code 0 or 1, and sarif); the exit
# code of amilint when it could not scan (2).
set -euo pipefail

target=${AMILINT_TARGET:?set the target input: what to scan}
fail_on=${AMILINT_FAIL_ON:-high}
out=${AMILINT_OUTPUT_DIR:-amilint-report}
amilint=${AMILINT:-amilint}
read -r -a extra <<<"${AMILINT_ARGS:-}"

mkdir -p "$out"
sarif=$out/amilint.sarif
code=0
"$amilint" scan "$target" -o sarif --output "$sarif" --fail-on "$fail_on" "${extra[@]}" || code=$?
case $code in
  0) echo "amilint: nothing at or above $fail_on in $target" ;;
  1) echo "amilint: findings at or above $fail_on in $target (see code scanning, or $sarif)" ;;
  *)
    echo "::error title=amilint::could not scan $target (exit $code)" >&2
    exit "$code"
    ;;
esac
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  echo "exit-code=$code" >>"$GITHUB_OUTPUT"
  echo "sarif=$sarif" >>"$GITHUB_OUTPUT"
fi
