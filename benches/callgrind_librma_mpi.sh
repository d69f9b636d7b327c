#!/usr/bin/env bash
# librma-mpi's instructions per iteration of benches/mpi/rma_latency.c's loops (8 bytes,
# 2 ranks, shared memory), under Debian's MPICH with librma-mpi preloaded: callgrind on
# both ranks, collecting only inside the loop's calls (issue(), MPI_Win_flush, lock and
# unlock, lock_all and unlock_all), rank 0's total over the iterations. Exact and
# repeatable, unlike a timer on a shared machine; compare with benches/callgrind_shm.sh
# (rma's own OSU loops) for what the C layer adds (issue #26).
#
# usage: benches/callgrind_librma_mpi.sh [LIB...]
#   (default LIB: target/mpicc.mpich/release/librma_mpi.so, built here; several
#    libraries: one column each, e.g. a baseline build beside this one)
set -euo pipefail
cd "$(dirname "$0")/.."
n=4000
libs=("$@")
if [ ${#libs[@]} -eq 0 ]; then
  MPICC=mpicc.mpich CARGO_TARGET_DIR=target/mpicc.mpich cargo build --release -q -p rma-mpi
  libs=("$PWD/target/mpicc.mpich/release/librma_mpi.so")
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc.mpich -O2 -o "$out/rma_latency" benches/mpi/rma_latency.c
rows=("put flush" "get flush" "acc flush" "get_acc flush" "fop flush" "cas flush"
  "put lock" "fop lock" "put lock_all")
printf '%-9s %-9s' op sync
for l in "${libs[@]}"; do printf ' %12s' "$(basename "$(dirname "$(dirname "$l")")")"; done
echo
for row in "${rows[@]}"; do
  read -r op sync <<<"$row"
  printf '%-9s %-9s' "$op" "$sync"
  for l in "${libs[@]}"; do
    rm -f "$out"/cg.*
    timeout 300 mpiexec.mpich -n 2 -genv LD_PRELOAD "$(realpath "$l")" valgrind --tool=callgrind \
      --collect-atstart=no --toggle-collect=issue --toggle-collect=MPI_Win_flush \
      --toggle-collect=MPI_Win_lock --toggle-collect=MPI_Win_unlock \
      --toggle-collect=MPI_Win_lock_all --toggle-collect=MPI_Win_unlock_all \
      --callgrind-out-file="$out/cg.%p" "$out/rma_latency" "$op" "$sync" "$n" 10 >/dev/null 2>&1
    # Rank 0 issues the ops: the larger of the two totals (rank 1 only waits).
    total=$(for f in "$out"/cg.*; do
      callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
    done | sort -n | tail -1)
    printf ' %12.1f' "$(echo "$total / ($n + 10)" | bc -l)"
  done
  echo
done
