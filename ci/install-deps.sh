#!/usr/bin/env bash
# System packages the tests need, from Debian's archive: MPICH (Hydra's mpiexec, for the
# PMI-1 and PMI-2 bootstraps), Slurm with munge (srun --mpi=pmi2 and --mpi=pmix), OpenPMIx
# and Open MPI (the PMIx bootstrap, mpirun; both MPIs' headers for the `mpi` feature), libfabric (the ofi backend), rdma-core's
# libibverbs and librdmacm (the verbs backend), and clang,
# libclang + pkg-config (bindgen builds the PMIx and libfabric bindings; the workspace is
# tested with --all-features), hwloc (topology and binding), iproute2 (simulated hosts). Idempotent: does nothing when everything is there.
set -euo pipefail
need=()
command -v mpiexec.hydra >/dev/null || need+=(mpich)
command -v srun >/dev/null || need+=(slurm-client)
command -v slurmctld >/dev/null || need+=(slurmctld slurm-wlm-basic-plugins)
command -v slurmd >/dev/null || need+=(slurmd)
command -v munged >/dev/null || need+=(munge)
[ -e /usr/lib/x86_64-linux-gnu/libpmix.so.2 ] || need+=(libpmix2)
pkg-config --exists pmix 2>/dev/null || need+=(libpmix-dev pkg-config)
mpirun --version 2>/dev/null | grep -q "Open MPI" || need+=(openmpi-bin)
# The headers and compiler wrappers of both MPIs: the `mpi` feature (the mpi crate binds
# whichever MPICC names) is built and tested against MPICH and Open MPI.
command -v mpicc.mpich >/dev/null && [ -d /usr/include/x86_64-linux-gnu/mpich ] || need+=(libmpich-dev)
command -v mpicc.openmpi >/dev/null && [ -d /usr/lib/x86_64-linux-gnu/openmpi/include ] || need+=(libopenmpi-dev)
# gfortran: librma-mpi's Fortran tests (mpif.h, use mpi, use mpi_f08) under both MPIs.
command -v gfortran >/dev/null || need+=(gfortran)
[ -f /usr/include/rdma/fabric.h ] || need+=(libfabric-dev)
# rma-verbs (feature verbs; rdma-sys binds rdma-core's headers and links libibverbs and
# librdmacm). ci/verbs.sh installs what its VM needs itself.
pkg-config --exists libibverbs 2>/dev/null || need+=(libibverbs-dev)
pkg-config --exists librdmacm 2>/dev/null || need+=(librdmacm-dev)
# hwloc (rma's opt-in feature `hwloc`, tested with --all-features); hwlocality's build
# script links hwloc's static pkg-config line, which names libudev.
pkg-config --exists hwloc 2>/dev/null || need+=(libhwloc-dev pkg-config)
[ -e /usr/lib/x86_64-linux-gnu/libudev.so ] || need+=(libudev-dev)
command -v clang >/dev/null || need+=(clang)
# ip (netns, veth, bridge) and unshare for the simulated hosts of the hybrid tests.
[ -x /usr/sbin/ip ] || [ -x /bin/ip ] || need+=(iproute2)
command -v unshare >/dev/null || need+=(util-linux)
# A venv for PyPI's MPICH 5.0.2 wheel, whose libfabric 2.5.1 the ofi conformance also
# runs on (ci/libfabric2.sh).
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install as root: apt-get install ${need[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
