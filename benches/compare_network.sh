#!/usr/bin/env bash
# rma beside MPICH 5 across libfabric tcp, in one invocation (issue #27): 2 ranks on this
# host forced through the network. rma's OSU binaries with RMA_BACKEND=ofi on the tcp
# provider, on the system's libfabric (Debian 12: 1.17, where tcp is tcp;ofi_rxm) and on
# the libfabric 2.5.1 that PyPI's MPICH 5.0.2 wheel ships (LD_LIBRARY_PATH, libfabric's
# versioned ABI; tcp is its own RDM endpoint there), each with ordered puts (the default)
# and with RMA_OFI_ORDERED=0 (every put delivery-complete before the epoch's closing
# message: the previous protocol); benches/mpi/rma_latency.c (the same loops in MPI)
# under MPICH 5.0.2 ch4:ofi on the same libfabric 2.5.1 and provider
# (MPIR_CVAR_NOLOCAL=1, FI_PROVIDER=tcp). 8-byte latencies in microseconds, medians of
# REPS interleaved rounds. Last, put + flush beside libfabric's own delivery-complete
# write round trip timed in the same run (`--reference`), and 1 MiB bandwidth beside
# benches/mpi/rma_bw.c under MPICH; then start-up (World::init beside MPICH 5's MPI_Init).
#
# usage: bash benches/compare_network.sh [REPS] [ITERS]    (defaults 3, 3000)
#   VENVS=dir (default target/peer-venvs) holds the MPICH venv; needs python3 and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
iters=${2:-3000}
warmup=$((iters / 10))
# shellcheck source=benches/scripts/peer_venvs.sh
source benches/scripts/peer_venvs.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$venvs/mpich/bin/mpicc" -O2 -o "$out/mpich" benches/mpi/rma_latency.c
cargo build --release -q -p rma-benches --features ofi --bins
# The start-up rows launch rma_init under rma-run (a binary of the rma crate).
cargo build --release -q -p rma --bin rma-run
wheel_fabric=$(cd "$venvs/mpich/lib/mpich" && pwd)
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
export RMA_OFI_PROVIDER=tcp
rma() { # LIBDIR ORDERED OP SYNC
  local op=$3 sync=$4
  env ${1:+LD_LIBRARY_PATH=$1} RMA_OFI_ORDERED="$2" timeout 300 \
    "target/release/osu_${op}_latency" -b ofi -m 8:8 -i "$iters" -x "$warmup" -s "$sync" |
    awk '$1 == "8" {print $2}'
}
rows=(
  "put flush" "get flush" "acc flush" "get_acc flush" "fop flush" "cas flush"
  "put lock" "put lock_all" "put fence" "put pscw"
)
echo "libfabric tcp, 2 ranks on one host, 8 bytes, us (medians of $reps)"
echo
echo "| row | rma, 1.17 | rma, 1.17, RMA_OFI_ORDERED=0 | rma, 2.5.1 | rma, 2.5.1, RMA_OFI_ORDERED=0 | MPICH 5.0.2 ch4:ofi (2.5.1) | rma 2.5.1 / MPICH |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for row in "${rows[@]}"; do
  read -r op sync <<<"$row"
  declare -A c=()
  for _ in $(seq "$reps"); do
    c[a]+=" $(rma "" 1 "$op" "$sync")"
    c[b]+=" $(rma "" 0 "$op" "$sync")"
    c[c]+=" $(rma "$wheel_fabric" 1 "$op" "$sync")"
    c[d]+=" $(rma "$wheel_fabric" 0 "$op" "$sync")"
    c[m]+=" $(MPICH_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=tcp timeout 300 \
      "$venvs/mpich/bin/mpiexec" -n 2 "$out/mpich" "$op" "$sync" "$iters" "$warmup" | awk '{print $3}')"
  done
  a=$(median <<<"${c[a]}") b=$(median <<<"${c[b]}") cc=$(median <<<"${c[c]}")
  d=$(median <<<"${c[d]}") m=$(median <<<"${c[m]}")
  echo "| $op + $sync | $a | $b | $cc | $d | $m | $(awk -v a="$cc" -v b="$m" 'BEGIN {printf "%.2f", a / b}') |"
  unset c
done
echo
echo "put + flush beside libfabric's delivery-complete write (fi_writemsg, FI_DELIVERY_COMPLETE), same run:"
for lib in "" "$wheel_fabric"; do
  env ${lib:+LD_LIBRARY_PATH=$lib} timeout 300 target/release/osu_put_latency -b ofi \
    -m 8:8 -i "$iters" -x "$warmup" -s flush --reference | awk -v l="${lib:+2.5.1}" \
    '$1 == "8" {printf "  libfabric %s: rma %s us, bare %s us, ratio %s\n", (l == "" ? "1.17" : l), $2, $3, $4}'
done
echo
echo "bandwidth, 1 MiB, 64 per flush, MB/s (medians of $reps; MPICH: benches/mpi/rma_bw.c, the same loop):"
"$venvs/mpich/bin/mpicc" -O2 -o "$out/mpich_bw" benches/mpi/rma_bw.c
for op in put get; do
  declare -A c=()
  for _ in $(seq "$reps"); do
    c[a]+=" $(RMA_OFI_ORDERED=1 timeout 300 "target/release/osu_${op}_bw" -b ofi -m 1048576:1048576 -i 30 -x 3 | awk '$1 == "1048576" {print $2}')"
    c[c]+=" $(LD_LIBRARY_PATH=$wheel_fabric timeout 300 "target/release/osu_${op}_bw" -b ofi -m 1048576:1048576 -i 30 -x 3 | awk '$1 == "1048576" {print $2}')"
    # Gets into and puts from buffers their requests hold (Window::get_owned,
    # Window::put_from_buffer): lent to the provider, many in flight, as MPI_Get's and
    # MPI_Put's buffers are the library's until the flush.
    c[o]+=" $(LD_LIBRARY_PATH=$wheel_fabric timeout 300 "target/release/osu_${op}_bw" -b ofi -m 1048576:1048576 -i 30 -x 3 --owned-buffers | awk '$1 == "1048576" {print $2}')"
    c[m]+=" $(MPICH_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=tcp timeout 300 \
      "$venvs/mpich/bin/mpiexec" -n 2 "$out/mpich_bw" "$op" 1048576 64 30 3 | awk '{print $3}')"
  done
  echo "  $op: rma 1.17 $(median <<<"${c[a]}"), rma 2.5.1 $(median <<<"${c[c]}"), rma 2.5.1 held buffers $(median <<<"${c[o]}"), MPICH 5.0.2 $(median <<<"${c[m]}")"
  unset c
done
echo
echo "start-up, 2 ranks, us per process (mean over the ranks; medians of $reps): World::init"
echo "(benches rma_init, under rma-run) beside MPI_Init (benches/scripts/mpi_init.c) of MPICH 5.0.2:"
"$venvs/mpich/bin/mpicc" -O2 -o "$out/mpich_init" benches/scripts/mpi_init.c
declare -A c=()
for _ in $(seq "$reps"); do
  c[a]+=" $(RMA_BACKEND=ofi timeout 300 target/release/rma-run -n 2 target/release/rma_init | awk '/nprocs/ {print $(NF-1)}')"
  c[c]+=" $(RMA_BACKEND=ofi LD_LIBRARY_PATH=$wheel_fabric timeout 300 target/release/rma-run -n 2 target/release/rma_init | awk '/nprocs/ {print $(NF-1)}')"
  c[m]+=" $(MPICH_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=tcp timeout 300 \
    "$venvs/mpich/bin/mpiexec" -n 2 "$out/mpich_init" | awk '/nprocs/ {print $(NF-1)}')"
done
echo "  rma 1.17 $(median <<<"${c[a]}"), rma 2.5.1 $(median <<<"${c[c]}"), MPICH 5.0.2 ch4:ofi (2.5.1) $(median <<<"${c[m]}")"
echo "  (libfabric 1.17's verbs provider reads /proc/kallsyms twice in every fi_getinfo's first"
echo "  call, whatever FI_PROVIDER says: most of rma's time on 1.17; 2.x has no such cost here)"
unset c
echo
echo "flush litmus (benches/mpi/flush_litmus.c, 3 ranks, 2000 rounds): reads by a third process"
echo "older than a put its origin flushed (MPI asks for 0):"
"$venvs/mpich/bin/mpicc" -O2 -o "$out/flush_litmus" benches/mpi/flush_litmus.c
echo "  MPICH 5.0.2 ch4:ofi tcp: $(MPICH_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=tcp \
  timeout 300 "$venvs/mpich/bin/mpiexec" -n 3 "$out/flush_litmus" 2000 200 | grep -o '[0-9]* stale')"
if command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null; then
  # librma-mpi with the ofi backend, under Debian's MPICH 4.0.2 (its messages; rma's RMA).
  MPICC=mpicc.mpich CARGO_TARGET_DIR=target/mpicc.mpich-ofi cargo build --release -q \
    -p rma-mpi --features rma/ofi
  mpicc.mpich -O2 -o "$out/flush_litmus4" benches/mpi/flush_litmus.c
  echo "  librma-mpi, RMA_BACKEND=ofi tcp (2.5.1): $(RMA_BACKEND=ofi LD_LIBRARY_PATH=$wheel_fabric \
    timeout 300 mpiexec.mpich -n 3 -genv LD_PRELOAD "$PWD/target/mpicc.mpich-ofi/release/librma_mpi.so" \
    "$out/flush_litmus4" 2000 200 | grep -o '[0-9]* stale')"
fi
