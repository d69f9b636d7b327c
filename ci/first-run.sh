#!/usr/bin/env bash
# The README's first command as a newcomer runs it on a machine with nothing but a Rust
# toolchain (issue #25): a clean target directory, pkg-config finding nothing, and no
# crate in the build that binds a system library (hwloc, libfabric, PMIx, verbs) or
# runs bindgen. It must print OSU's table.
set -euo pipefail
cd "$(dirname "$0")/.."
# What the default build compiles: nothing that needs a system library or C headers.
tree=$(cargo tree -p rma-benches -e normal,build --prefix none --format '{p}' | sort -u)
for crate in hwlocality-sys hwlocality bindgen rdma-sys rma-ofi rma-verbs pkg-config; do
  if grep -q "^$crate " <<<"$tree"; then
    echo "the default build of rma-benches depends on $crate" >&2
    exit 1
  fi
done
empty=$(mktemp -d /tmp/rma-no-pkgconfig.XXXXXX)
target=$(mktemp -d /tmp/rma-first-run.XXXXXX)
trap 'rm -rf "$empty" "$target"' EXIT
out=$(env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR="$empty" CARGO_TARGET_DIR="$target" \
  cargo run --release -p rma-benches --bin osu_put_latency 2>&1) || {
  echo "$out" >&2
  echo "the README's first command failed" >&2
  exit 1
}
echo "$out" | tail -n 25
# OSU's table: its title, the column header, and a latency for 8 bytes.
grep -q "^# OSU MPI_Put Latency Test" <<<"$out"
grep -Eq "^# Size +Latency \(us\)" <<<"$out"
grep -Eq "^8 +[0-9]+\.[0-9]+" <<<"$out"
echo "first run: OSU's table printed"
