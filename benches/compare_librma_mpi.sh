#!/usr/bin/env bash
# librma-mpi against MPI's own one-sided paths, in one invocation: unmodified OSU 7.4
# one-sided binaries under MPICH alone, under MPICH with librma-mpi preloaded, under
# Open MPI (its default osc component and osc/sm), beside rma's own Rust benchmark of the
# same pattern (rma-run, shared memory). 2 ranks, 8-byte latencies (put, get, acc, fop;
# -w allocate with -s flush and -s lock) and 1 MiB put bandwidth.
#
# The OSU sources are not part of this repository (build them from OSU 7.4 with
# CC=mpicc.mpich and CC=mpicc.openmpi):
#   OSU_MPICH=dir OSU_OMPI=dir [LIB=target/release/librma_mpi.so] [REPS=3] \
#     benches/compare_librma_mpi.sh
# LIB must be built for MPICH: MPICC=mpicc.mpich cargo build --release -p rma-mpi.
# Prints a markdown table; each cell is the median of REPS runs.
set -u
cd "$(dirname "$0")/.."
: "${OSU_MPICH:?set OSU_MPICH to the OSU one-sided binaries built with mpicc.mpich}"
: "${OSU_OMPI:?set OSU_OMPI to the OSU one-sided binaries built with mpicc.openmpi}"
LIB=${LIB:-$PWD/target/release/librma_mpi.so}
REPS=${REPS:-3}
LAT="-i ${LAT_ITERS:-20000} -x ${LAT_WARMUP:-2000}"
BW="-i ${BW_ITERS:-200} -x ${BW_WARMUP:-20}"
ROOT=(); [ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)
OMPI=(mpirun.openmpi "${ROOT[@]}" --oversubscribe --bind-to core -np 2 --mca btl self,vader)
[ -f "$LIB" ] || { echo "no $LIB" >&2; exit 2; }
[ -x target/release/rma-run ] && [ -x target/release/osu_put_latency ] ||
  cargo build --release -p rma -p rma-benches >&2

launch() { # config, binary, args...
  local cfg=$1 bin=$2; shift 2
  case $cfg in
    mpich) timeout -k 5 300 mpiexec.mpich -bind-to core -n 2 "$OSU_MPICH/$bin" "$@" ;;
    rma) timeout -k 5 300 mpiexec.mpich -bind-to core -genv LD_PRELOAD "$LIB" -n 2 \
      "$OSU_MPICH/$bin" "$@" ;;
    ompi) timeout -k 5 300 "${OMPI[@]}" "$OSU_OMPI/$bin" "$@" ;;
    ompi_sm) timeout -k 5 300 "${OMPI[@]}" --mca osc sm "$OSU_OMPI/$bin" "$@" ;;
    rust) timeout -k 5 300 target/release/rma-run -n 2 "target/release/$bin" "$@" ;;
  esac
}

median() { sort -g | awk '{a[NR]=$1} END{if(NR==0){print "FAIL"; exit}
  if(NR%2) print a[(NR+1)/2]; else printf "%.2f\n",(a[NR/2]+a[NR/2+1])/2}'; }

CONFIGS="mpich rma ompi ompi_sm rust"
declare -A RES
TESTS=()
for s in flush lock; do
  TESTS+=("put 8B|$s|osu_put_latency -m 8:8 -w allocate -s $s $LAT")
  TESTS+=("get 8B|$s|osu_get_latency -m 8:8 -w allocate -s $s $LAT")
  TESTS+=("acc 8B|$s|osu_acc_latency -m 8:8 -w allocate -s $s $LAT")
  TESTS+=("fop|$s|osu_fop_latency -w allocate -s $s $LAT")
done
TESTS+=("put_bw 1MiB|flush|osu_put_bw -m 1048576:1048576 -w allocate -s flush $BW")
for t in "${TESTS[@]}"; do
  IFS='|' read -r name sync cmd <<<"$t"
  for cfg in $CONFIGS; do
    vals=()
    for _ in $(seq "$REPS"); do
      # shellcheck disable=SC2086 # the command's words
      v=$(launch "$cfg" $cmd 2>/dev/null | awk '/^[0-9]+ +[0-9.]+/{v=$2} END{print v}')
      [ -n "$v" ] && vals+=("$v")
    done
    RES[$name,$sync,$cfg]=$(printf '%s\n' "${vals[@]}" | grep . | median)
    echo "# $name $sync $cfg: ${RES[$name,$sync,$cfg]}" >&2
  done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a+0>0 && b+0>0) printf "%.2f", a/b; else print "-" }'; }
echo "| test | sync | MPICH | MPICH + librma-mpi | Open MPI (osc/rdma) | Open MPI osc/sm | rma (Rust) | MPICH / librma-mpi | osc/sm / librma-mpi | librma-mpi / rma (Rust) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for t in "${TESTS[@]}"; do
  IFS='|' read -r name sync _ <<<"$t"
  m=${RES[$name,$sync,mpich]} r=${RES[$name,$sync,rma]} o=${RES[$name,$sync,ompi]}
  os=${RES[$name,$sync,ompi_sm]} ru=${RES[$name,$sync,rust]}
  if [[ $name == put_bw* ]]; then # bandwidth: higher is better
    echo "| $name (MB/s) | $sync | $m | $r | $o | $os | $ru | $(ratio "$r" "$m") | $(ratio "$r" "$os") | $(ratio "$ru" "$r") |"
  else
    echo "| $name (us) | $sync | $m | $r | $o | $os | $ru | $(ratio "$m" "$r") | $(ratio "$os" "$r") | $(ratio "$r" "$ru") |"
  fi
done
echo
echo "Ratios: MPICH / librma-mpi and osc/sm / librma-mpi above 1 mean librma-mpi is faster;"
echo "librma-mpi / rma (Rust) is the C layer's cost (1.00: none)."
