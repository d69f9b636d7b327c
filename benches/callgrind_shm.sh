#!/usr/bin/env bash
# Instructions per iteration of the OSU latency loops over shared memory (two real
# processes, the default backend), counted by callgrind on the origin: each binary run
# for N and 2N iterations of 8 bytes, the difference of the origin's totals divided by
# N. Exact and repeatable on a shared machine. Passive modes only (flush, lock,
# lock_all): in fence and PSCW the origin's count includes its spinning on the target.
#
# usage: benches/callgrind_shm.sh [N] [TARGET_DIR ...]
#   (default N 2000, TARGET_DIR target/release, built here when it is the default;
#    several directories: one column each, e.g. a baseline build beside this one)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000}
shift || true
dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
  cargo build --release -q -p rma-benches
  dirs=(target/release)
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The origin's total instructions for one run: rank 0's file (valgrind names each
# process's file by its RMA_RUN_RANK; the launching parent has none).
origin_total() {
  callgrind_annotate "$1.0" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
}
rows=(
  "osu_put_latency flush" "osu_get_latency flush" "osu_acc_latency flush"
  "osu_get_acc_latency flush" "osu_fop_latency flush" "osu_cas_latency flush"
  "osu_put_latency lock" "osu_fop_latency lock" "osu_put_latency lock_all"
)
printf '%-22s %-9s' binary sync
for d in "${dirs[@]}"; do printf ' %16s' "$(cd "$d/../.." && basename "$PWD")"; done
echo
for row in "${rows[@]}"; do
  read -r bin sync <<<"$row"
  printf '%-22s %-9s' "$bin" "$sync"
  for d in "${dirs[@]}"; do
    for i in $n $((2 * n)); do
      rm -f "$out"/run.*
      RMA_RUN_RANK=launcher valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$out/run.%q{RMA_RUN_RANK}" \
        "$d/$bin" -m 8:8 -i "$i" -x 10 -s "$sync" -w allocate >/dev/null 2>&1
      eval "t$i=$(origin_total "$out/run")"
    done
    a=t$n b=t$((2 * n))
    printf ' %16.1f' "$(echo "(${!b} - ${!a}) / $n" | bc -l)"
  done
  echo
done
