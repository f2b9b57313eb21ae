#!/usr/bin/env bash
# bench-units.sh AMILINT ROOT [RUNS]: times whole processes, side by side in
# one run: `amilint units ROOT -o tsv` against the reference,
# `systemctl --root=ROOT list-unit-files`, and prints the ratio, the peak RSS
# of each, and whether both list the same units with the same states.
set -euo pipefail
amilint=$1 root=$2 runs=${3:-20}
[ -d "$root" ] || { echo "bench-units: no root at $root (make debian-root)"; exit 0; }
command -v systemctl >/dev/null || { echo "bench-units: no systemctl here"; exit 0; }

# mean wall time in microseconds of RUNS runs of a command
mean_us() {
  local n=$1; shift
  local s e
  s=$(date +%s%N)
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1; done
  e=$(date +%s%N)
  echo $(( (e - s) / n / 1000 ))
}
rss_kb() { /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1; }

"$amilint" units "$root" -o tsv | sort > /tmp/bench-amilint.tsv
systemctl --root="$root" list-unit-files --no-legend --no-pager | awk '{print $1"\t"$2}' | sort > /tmp/bench-systemctl.tsv
if cmp -s /tmp/bench-amilint.tsv /tmp/bench-systemctl.tsv; then same=identical; else same=DIFFERENT; fi

sysruns=$(( runs / 4 > 2 ? runs / 4 : 2 ))
ours=$(mean_us "$runs" "$amilint" units "$root" -o tsv)
ref=$(mean_us "$sysruns" systemctl --root="$root" list-unit-files --no-legend --no-pager)
startup=$(mean_us "$runs" "$amilint" version)
printf 'units of %s (%d unit files, %s output)\n' "$root" "$(wc -l < /tmp/bench-amilint.tsv)" "$same"
printf '  %-44s %8.1f ms  %6d KB peak RSS\n' "amilint units -o tsv" "$(echo "$ours/1000" | bc -l)" "$(rss_kb "$amilint" units "$root" -o tsv)"
printf '  %-44s %8.1f ms  %6d KB peak RSS\n' "systemctl --root list-unit-files" "$(echo "$ref/1000" | bc -l)" "$(rss_kb systemctl --root="$root" list-unit-files --no-legend --no-pager)"
printf '  %-44s %8.1f ms\n' "(amilint process start-up: amilint version)" "$(echo "$startup/1000" | bc -l)"
printf '  ratio: amilint is %.1fx faster (whole processes)\n' "$(echo "$ref/$ours" | bc -l)"
