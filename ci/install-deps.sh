#!/usr/bin/env bash
# System packages the tests need, from Debian's archive: MPICH (Hydra's mpiexec, to test
# the PMI-1 bootstrap). Idempotent: does nothing when everything is there.
set -euo pipefail
need=()
command -v mpiexec.hydra >/dev/null || need+=(mpich)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install as root: apt-get install ${need[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
