#!/usr/bin/env bash
# A current libfabric for the ofi conformance (issue #27): MPICH 5.0.2's wheel from PyPI
# ships libfabric 2.5.1 (lib/mpich/libfabric.so.1), which rma, built against Debian's
# 1.17 headers, runs on unchanged. Installs it into a venv under DIR (default
# target/libfabric2-venv) once and prints the directory of libfabric.so.1.
#
# usage: bash ci/libfabric2.sh [DIR]
set -euo pipefail
dir=${1:-target/libfabric2-venv}
if [ ! -e "$dir/lib/mpich/libfabric.so.1" ]; then
  python3 -m venv "$dir" >&2
  "$dir/bin/pip" install -q "mpich==5.0.2" >&2
fi
lib=$(cd "$dir/lib/mpich" && pwd)
[ -e "$lib/libfabric.so.1" ] || { echo "no libfabric.so.1 in $lib" >&2; exit 1; }
echo "$lib"
