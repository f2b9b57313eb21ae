#!/usr/bin/env bash
# bench-security.sh AMILINT ROOT [RUNS]: times whole processes, side by side
# in one run: `amilint security ROOT` (every service of the image) against
# `amilint units ROOT -o tsv` (the budget: at most 2x) and against the
# reference, `systemd-analyze security --offline=true --root=ROOT` on the
# same services (amilint must be faster), and checks that both score every
# service alike. It prints wall and CPU (user + system) time: on a shared
# machine the wall time of the longer command suffers more from the load.
set -euo pipefail
amilint=$1 root=$2 runs=${3:-20}
[ -d "$root" ] || { echo "bench-security: no root at $root (make debian-root)"; exit 0; }
command -v systemd-analyze >/dev/null || { echo "bench-security: no systemd-analyze here"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" # systemd-analyze resolves unit names against the working directory first

# run CMD...: runs a command, output discarded, and appends its wall and
# CPU (user + system) seconds to the file named by $took.
run() {
  local TIMEFORMAT='%3R %3U %3S'
  { time "$@" >/dev/null 2>&1; } 2>>"$took" || true
}
# mean FILE: "WALL_MS CPU_MS", the means over the runs in FILE.
mean() { awk '{w += $1; c += $2 + $3; n++} END {printf "%.1f %.1f", 1000 * w / n, 1000 * c / n}' "$1"; }

"$amilint" security "$root" -o json > units.json
mapfile -t names < <(python3 -c 'import json,sys; [print(u["unit"]) for u in json.load(open("units.json"))["units"] if "exposure" in u]')
python3 -c 'import json; [print(u["id"], "%.1f" % u["exposure"]) for u in json.load(open("units.json"))["units"] if "exposure" in u]' | sort > amilint.txt
systemd-analyze security --offline=true --root="$root" --no-pager "${names[@]}" 2>/dev/null |
  sed -n 's/.*Overall exposure level for \([^:]*\): \([0-9.]*\).*/\1 \2/p' | sort > analyze.txt
if cmp -s amilint.txt analyze.txt; then same=identical; else same=DIFFERENT; fi

for i in $(seq "$runs"); do
  took=sec.t run "$amilint" security "$root"
  took=units.t run "$amilint" units "$root" -o tsv
  took=ref.t run systemd-analyze security --offline=true --root="$root" --no-pager "${names[@]}"
done
read -r sw sc <<<"$(mean sec.t)"
read -r uw uc <<<"$(mean units.t)"
read -r rw rc <<<"$(mean ref.t)"
printf 'security of %s (%d services, scores %s to systemd-analyze)\n' "$root" "${#names[@]}" "$same"
printf '  %-52s %8s ms wall %8s ms cpu\n' "amilint security ROOT" "$sw" "$sc"
printf '  %-52s %8s ms wall %8s ms cpu\n' "amilint units ROOT -o tsv" "$uw" "$uc"
printf '  %-52s %8s ms wall %8s ms cpu\n' "systemd-analyze security --offline=true (same units)" "$rw" "$rc"
printf '  ratio: security / units = %.2fx wall, %.2fx cpu (budget 2x); systemd-analyze / security = %.2fx wall, %.2fx cpu\n' \
  "$(echo "$sw/$uw" | bc -l)" "$(echo "$sc/$uc" | bc -l)" "$(echo "$rw/$sw" | bc -l)" "$(echo "$rc/$sc" | bc -l)"
