#!/usr/bin/env bash
# bench-units.sh AMILINT ROOT [RUNS]: times whole processes, side by side in
# one run: `amilint units ROOT -o tsv` against the reference,
# `systemctl --root=ROOT list-unit-files`, and prints the ratio, the peak RSS
# of each, and whether both list the same units with the same states.
set -euo pipefail
amilint=$1 root=$2 runs=${3:-20}
[ -d "$root" ] || { echo "bench-units: no root at $root (make debian-root)"; exit 0; }
command -v systemctl >/dev/null || { echo "bench-units: no systemctl here"; exit 0; }

# run_us CMD...: runs a command, output discarded, and adds its wall time in
# microseconds to the variable named by $took (bash's EPOCHREALTIME: no fork
# to read the clock).
run_us() {
  local s=${EPOCHREALTIME/./}
  "$@" >/dev/null 2>&1
  local e=${EPOCHREALTIME/./}
  printf -v "$took" %d $(( ${!took} + e - s ))
}
rss_kb() { /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1; }

"$amilint" units "$root" -o tsv | sort > /tmp/bench-amilint.tsv
systemctl --root="$root" list-unit-files --no-legend --no-pager | awk '{print $1"\t"$2}' | sort > /tmp/bench-systemctl.tsv
if cmp -s /tmp/bench-amilint.tsv /tmp/bench-systemctl.tsv; then same=identical; else same=DIFFERENT; fi

# The three commands take turns (amilint units, amilint version, and every
# few rounds systemctl), so a load change on a shared machine during the run
# weighs on each side alike; each figure is a mean over its runs.
sysruns=$(( runs / 4 > 2 ? runs / 4 : 2 ))
every=$(( runs / sysruns ))
ours_sum=0 ref_sum=0 startup_sum=0 refs=0
for i in $(seq "$runs"); do
  took=ours_sum run_us "$amilint" units "$root" -o tsv
  took=startup_sum run_us "$amilint" version
  if (( i % every == 0 && refs < sysruns )); then
    took=ref_sum run_us systemctl --root="$root" list-unit-files --no-legend --no-pager
    refs=$(( refs + 1 ))
  fi
done
ours=$(( ours_sum / runs )) ref=$(( ref_sum / refs )) startup=$(( startup_sum / runs ))
printf 'units of %s (%d unit files, %s output)\n' "$root" "$(wc -l < /tmp/bench-amilint.tsv)" "$same"
printf '  %-44s %8.1f ms  %6d KB peak RSS\n' "amilint units -o tsv" "$(echo "$ours/1000" | bc -l)" "$(rss_kb "$amilint" units "$root" -o tsv)"
printf '  %-44s %8.1f ms  %6d KB peak RSS\n' "systemctl --root list-unit-files" "$(echo "$ref/1000" | bc -l)" "$(rss_kb systemctl --root="$root" list-unit-files --no-legend --no-pager)"
printf '  %-44s %8.1f ms\n' "(amilint process start-up: amilint version)" "$(echo "$startup/1000" | bc -l)"
printf '  ratio: amilint is %.1fx faster (whole processes)\n' "$(echo "$ref/$ours" | bc -l)"
