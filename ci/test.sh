#!/usr/bin/env bash
# The project's test command (README: "Run all the tests"). Installs the system packages
# the tests need, then lints, builds and runs every test of the workspace: unit, protocol
# and property tests on the simulated transport, the conformance suite across real
# processes (rma-run and MPICH's mpiexec), doc examples. Each multi-process test has its
# own deadline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
export RMA_REQUIRE_MPIEXEC=1
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --quiet
cargo test --workspace --all-features
