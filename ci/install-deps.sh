#!/usr/bin/env bash
# System packages the tests need, from Debian's archive: MPICH (Hydra's mpiexec, to test
# the PMI-1 bootstrap); libfabric's headers and library with clang/libclang for rma-ofi's
# bindgen (the workspace is tested with --all-features, so the `ofi` backend is built). Idempotent: does nothing when everything is there.
set -euo pipefail
need=()
command -v mpiexec.hydra >/dev/null || need+=(mpich)
[ -f /usr/include/rdma/fabric.h ] || need+=(libfabric-dev)
command -v clang >/dev/null || need+=(clang)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install as root: apt-get install ${need[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
