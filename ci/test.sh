#!/usr/bin/env bash
# The project's test command (README: "Run all the tests"). Installs the system packages
# the tests need, starts a two-node Slurm cluster on this host for the srun cases (one-node
# cases ask for -N 1), then lints, builds
# and runs every test of the workspace: unit, protocol and property tests on the
# simulated transport, the conformance suite across real processes (rma-run, MPICH's
# mpiexec with PMI-1 and PMI-2, srun --mpi=pmi2 and --mpi=pmix, Open MPI's mpirun), the
# benchmark smoke tests, doc
# examples, then the verbs backend inside a soft-RoCE VM (ci/verbs.sh). Each
# multi-process test has its own deadline.
set -euo pipefail
cd "$(dirname "$0")/.."
# The README's first command on a bare machine (before any system package goes in):
# a clean target directory, pkg-config finding nothing; it must print OSU's table.
bash ci/first-run.sh
bash ci/install-deps.sh
export RMA_REQUIRE_MPIEXEC=1 RMA_REQUIRE_MPIRUN=1
# The ofi conformance on libfabric 2.5.1 too (MPICH 5.0.2's wheel ships it).
RMA_TEST_LIBFABRIC2=$(bash ci/libfabric2.sh)
export RMA_TEST_LIBFABRIC2 RMA_REQUIRE_LIBFABRIC2=1
# Hybrid worlds across simulated hosts (network namespaces: CI runs as root).
export RMA_REQUIRE_NETNS=1
slurm_dir=$(mktemp -d /tmp/rma-slurm.XXXXXX)
trap 'bash ci/slurm/stop.sh; bash ci/netns/down.sh 3; rm -rf "$slurm_dir"' EXIT
if slurm_env=$(bash ci/slurm/start.sh "$slurm_dir" 2); then
  eval "$slurm_env"
  export RMA_REQUIRE_SLURM=1
else
  echo "Slurm did not start: the srun cases cannot run" >&2
  exit 1
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --quiet
cargo test --workspace --all-features --exclude rma-mpi
# MPI and rma in one process, and librma-mpi's C tests, against each MPI (the mpi crate
# and librma-mpi bind the one MPICC names; the line above used the default mpicc).
for cc in mpicc.mpich mpicc.openmpi; do
  MPICC=$cc CARGO_TARGET_DIR=target/$cc cargo test -p rma-conformance --features mpi \
    --test conformance -- mpi_and_rma_in_one_process
  # Under MPICH the C tests also run with rma over libfabric's tcp provider.
  features=()
  [ "$cc" = mpicc.mpich ] && features=(--features ofi)
  RMA_REQUIRE_FORTRAN=1 MPICC=$cc CARGO_TARGET_DIR=target/$cc cargo test -p rma-mpi "${features[@]}"
done
# MPICH 5.0.2 (the wheel's venv above), both its ABIs: MPICH's own (mpicc, libmpi) and
# the MPI-5 standard ABI (mpicc_abi, libmpi_abi), the C tests built by the same wrapper.
mpich5=$(cd "$RMA_TEST_LIBFABRIC2/../.." && pwd)
MPICC=$mpich5/bin/mpicc CARGO_TARGET_DIR=target/mpich5 cargo test -p rma-mpi
MPICC=$mpich5/bin/mpicc_abi CARGO_TARGET_DIR=target/mpicc_abi cargo test -p rma-mpi
# The verbs backend: the host kernel has no RDMA, so its tests run inside a qemu VM with
# soft-RoCE (rdma_rxe): conformance on 2-4 ranks, a killed peer, latency beside perftest.
bash ci/verbs.sh
