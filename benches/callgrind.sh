#!/usr/bin/env bash
# Instructions per operation on the engine's hot path, counted by callgrind (exact and
# repeatable, unlike a timer on a shared 2-core machine): the OSU latency binaries on the
# simulated RDMA transport (one process, no system noise), run for 2N and N iterations;
# the difference of the inclusive counts of `WindowShared::post` (under `Window::put` and
# `Window::get_into`), divided by N, is what one op costs. (Waits spin under valgrind's serialized threads, so the flush and
# whole-program totals are noise.)
#
# usage: benches/callgrind.sh [N]   (default 2000; prints instructions per call)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000}
cargo build --release -q -p rma-benches --bin osu_put_latency --bin osu_get_latency
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Inclusive instructions of the function named $2 in callgrind file $1 (the largest of
# the entries callgrind_annotate prints for it: the function itself and its call lines).
inclusive() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk -v f="$2" '{ line = $0; sub(/ \(.*x\)$/, "", line) }
      index(line, f) && substr(line, index(line, f) + length(f), 1) ~ /^( |\[|)$/ {
        gsub(",", "", $1); if ($1 + 0 > best) best = $1 + 0 }
      END { print best + 0 }'
}
# The public calls are thin and the compiler may inline them into the benchmark's loop;
# WindowShared::post, under them, is where every op is checked, posted and issued, and
# always stands as a function of its own.
call="window::WindowShared>::post"
printf '%-18s %-22s %10s\n' binary function instructions
for op in put get; do
  bin=target/release/osu_${op}_latency
  for i in $n $((2 * n)); do
    valgrind --tool=callgrind --callgrind-out-file="$out/$op.$i" \
      "$bin" -b sim-rdma -m 8:8 -i "$i" -x 10 >/dev/null 2>&1
  done
  per() { echo "($(inclusive "$out/$op.$((2 * n))" "$1") - $(inclusive "$out/$op.$n" "$1")) / $n" | bc -l; }
  printf '%-18s %-22s %10.1f\n' "osu_${op}_latency" "WindowShared::post" "$(per "$call")"
done
