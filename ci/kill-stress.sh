#!/usr/bin/env bash
# The kill trials' stress run, kept outside CI (issue #25): TRIALS trials per rank count
# (3 and 4 ranks) per backend (shm, libfabric tcp) while a parallel build of the
# workspace loads both cores, over and over. Prints each run's counts: survivors that
# named the killed rank, finished before it mattered, or anything else (a failure).
#   bash ci/kill-stress.sh [TRIALS]        (default 500: 1,000 trials per backend)
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-500}
cargo test -p rma-conformance --features ofi --test failure --no-run >/dev/null 2>&1
load_dir=$(mktemp -d /tmp/rma-load.XXXXXX)
# The load in a session of its own, so that it goes whole (cargo, rustc and all).
setsid bash -c "while true; do rm -rf '$load_dir/target'; CARGO_TARGET_DIR='$load_dir/target' \
  cargo build --workspace -j 2 >/dev/null 2>&1; done" &
load=$!
trap 'kill -- -$load 2>/dev/null; sleep 1; rm -rf "$load_dir"' EXIT
for t in killed_at_random_moments_every_survivor_ends_within_10_seconds_shm \
  ofi::killed_at_random_moments_every_survivor_ends_within_10_seconds_ofi_tcp; do
  RMA_KILL_TRIALS=$trials cargo test -p rma-conformance --features ofi --test failure \
    -- --exact "$t" --nocapture 2>&1 | grep -E "kill trials|test result|panicked|ended with|case kill_trial failed|init failed"
done
