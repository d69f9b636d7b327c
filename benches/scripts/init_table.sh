#!/usr/bin/env bash
# World::init() against MPI_Init under each launcher, 2, 4 and 8 ranks, in one run.
# Needs: a release build (cargo build --release -p rma-benches -p rma --features
# pmix,ofi), mpich and openmpi-bin with their compilers (libmpich-dev, libopenmpi-dev),
# and for the srun rows a Slurm cluster (ci/slurm/start.sh; SLURM_CONF exported); with
# two Slurm nodes, the -N 2 rows time hybrid worlds (shm inside a node, tcp between).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=target/release
tmp=$(mktemp -d)
mpicc.mpich -O2 -o "$tmp/init_mpich" benches/scripts/mpi_init.c 2>/dev/null || echo "# no mpicc.mpich (libmpich-dev)"
mpicc.openmpi -O2 -o "$tmp/init_ompi" benches/scripts/mpi_init.c 2>/dev/null || echo "# no mpicc.openmpi (libopenmpi-dev)"
row() { # launcher-label program args...
  local label=$1; shift
  local out
  out=$(timeout 120 "$@" 2>/dev/null | grep nprocs) || out="failed"
  printf "%-40s %s\n" "$label" "$out"
}
for n in 2 4 8; do
  row "rma-run, World::init" "$bin/rma-run" -n "$n" "$bin/rma_init"
  row "mpiexec.hydra (PMI-1), World::init" mpiexec.hydra -n "$n" "$bin/rma_init"
  [ -x "$tmp/init_mpich" ] && row "mpiexec.hydra, MPICH MPI_Init" mpiexec.hydra -n "$n" "$tmp/init_mpich"
  row "mpirun (PMIx), World::init" mpirun --allow-run-as-root --oversubscribe -n "$n" "$bin/rma_init"
  [ -x "$tmp/init_ompi" ] && row "mpirun, Open MPI MPI_Init" mpirun --allow-run-as-root --oversubscribe -n "$n" "$tmp/init_ompi"
  if [ -n "${SLURM_CONF:-}" ]; then
    row "srun --mpi=pmi2, World::init" srun -N 1 --mpi=pmi2 -n "$n" "$bin/rma_init"
    [ -x "$tmp/init_mpich" ] && row "srun --mpi=pmi2, MPICH MPI_Init" srun -N 1 --mpi=pmi2 -n "$n" "$tmp/init_mpich"
    row "srun --mpi=pmix, World::init" srun -N 1 --mpi=pmix -n "$n" "$bin/rma_init"
    [ -x "$tmp/init_ompi" ] && row "srun --mpi=pmix, Open MPI MPI_Init" srun -N 1 --mpi=pmix -n "$n" "$tmp/init_ompi"
    if [ "$(sinfo -h -o %D 2>/dev/null)" = 2 ]; then
      row "srun -N 2 --mpi=pmi2, World::init" srun -N 2 --mpi=pmi2 -n "$n" "$bin/rma_init"
      [ -x "$tmp/init_mpich" ] && row "srun -N 2 --mpi=pmi2, MPICH MPI_Init" srun -N 2 --mpi=pmi2 -n "$n" "$tmp/init_mpich"
      row "srun -N 2 --mpi=pmix, World::init" srun -N 2 --mpi=pmix -n "$n" "$bin/rma_init"
      [ -x "$tmp/init_ompi" ] && row "srun -N 2 --mpi=pmix, Open MPI MPI_Init" env OMPI_MCA_btl=self,tcp srun -N 2 --mpi=pmix -n "$n" "$tmp/init_ompi"
    fi
  fi
done
rm -rf "$tmp"
