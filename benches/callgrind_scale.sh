#!/usr/bin/env bash
# What an op costs the origin toward one of 1 or 4,096 active targets (issue #27's
# scale goal), counted by callgrind with its cache model (exact and repeatable, unlike a
# timer on a shared machine): benches/examples/post_scale.rs, rank 0 of a job over the
# echo transport, runs N and 2N ops round robin over the targets; the difference of the
# two runs' counts, divided by N, is one op: instructions and first-level data-cache
# misses (reads + writes) of the whole program (puts: with a sixteenth of a flush_all
# each) and of the put's call alone (`post_contiguous_put`).
#
# usage: benches/callgrind_scale.sh [N]   (default 8192)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-8192}
cargo build --release -q -p rma-benches --example post_scale
bin=target/release/examples/post_scale
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Ir, D1mr and D1mw of the program (PROGRAM TOTALS) or of function $2's inclusive count.
counts() {
  if [ -z "${2:-}" ]; then
    callgrind_annotate --show=Ir,D1mr,D1mw "$1" 2>/dev/null | sed 's/([^)]*)//g' |
      awk '/PROGRAM TOTALS/ { gsub(",", ""); print $1, $2, $3; exit }'
  else
    callgrind_annotate --inclusive=yes --show=Ir,D1mr,D1mw "$1" 2>/dev/null |
      sed 's/([^)]*)//g' | awk -v f="$2" 'index($0, f) { gsub(",", ""); print $1, $2, $3; exit }'
  fi
}
per_op() { # FILE_N FILE_2N [FUNCTION]
  read -r i1 r1 w1 <<<"$(counts "$1" "${3:-}")"
  read -r i2 r2 w2 <<<"$(counts "$2" "${3:-}")"
  awk -v n="$n" -v i="$((i2 - i1))" -v m="$((r2 - r1 + w2 - w1))" \
    'BEGIN { printf "%10.1f %10.2f", i / n, m / n }'
}
printf '%-4s %7s %10s %10s %10s %10s\n' op targets instr D1miss "put: instr" D1miss
for op in put fop; do
  for targets in 1 4096; do
    for i in $n $((2 * n)); do
      valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file="$out/$op.$targets.$i" \
        "$bin" "$targets" "$i" "$op" >/dev/null 2>&1
    done
    whole=$(per_op "$out/$op.$targets.$n" "$out/$op.$targets.$((2 * n))")
    call=""
    [ "$op" = put ] && call=$(per_op "$out/$op.$targets.$n" "$out/$op.$targets.$((2 * n))" \
      "post_contiguous_put [")
    printf '%-4s %7s %s %s\n' "$op" "$targets" "$whole" "$call"
  done
done
