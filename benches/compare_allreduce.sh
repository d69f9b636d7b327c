#!/usr/bin/env bash
# allreduce of 8 bytes on 2, 4 and 8 local ranks: rma's Comm::allreduce (the `comm`
# benchmark on shared memory) beside MPICH's and Open MPI's MPI_Allreduce, in one run.
# Usage: bash benches/compare_allreduce.sh [ITERS]
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-20000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build --release -q -p rma-benches --bin comm -p rma --bin rma-run
mpicc.mpich -O2 -o "$out/ar_mpich" benches/mpi/allreduce_latency.c
mpicc.openmpi -O2 -o "$out/ar_ompi" benches/mpi/allreduce_latency.c
printf "%-6s %-12s %-12s %-12s %s\n" ranks rma_us mpich_us ompi_us "rma/mpich"
for n in 2 4 8; do
  # More ranks than cores: MPICH's busy-polling ranks take milliseconds per call there,
  # so the MPI runs get fewer iterations past two ranks.
  mpi_iters=$iters
  [ "$n" -gt 2 ] && mpi_iters=$((iters / 50 / n))
  rma=$(target/release/rma-run -n "$n" -- target/release/comm $((iters / 100)) | awk '/^8 /{print $2}')
  mpich=$(mpiexec.mpich -n "$n" "$out/ar_mpich" "$mpi_iters" | awk '{print $2}')
  ompi=$(mpirun.openmpi --allow-run-as-root --oversubscribe -n "$n" "$out/ar_ompi" "$mpi_iters" | awk '{print $2}')
  printf "%-6s %-12s %-12s %-12s %s\n" "$n" "$rma" "$mpich" "$ompi" \
    "$(echo "scale=4; $rma / $mpich" | bc)"
done
