#!/usr/bin/env bash
# The project's test command (README: "Run all the tests"). Lints, builds and runs every
# test of the workspace, doc examples included. Each multi-rank test has its own deadline.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --quiet
cargo test --workspace --all-features
