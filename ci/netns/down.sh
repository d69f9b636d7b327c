#!/usr/bin/env bash
# Removes the simulated hosts of up.sh. Usage: bash ci/netns/down.sh [N]
n=${1:-2}
for i in $(seq 1 "$n"); do
  ip netns del "rma-h$i" 2>/dev/null || true
  ip link del "rma-v$i" 2>/dev/null || true
done
ip link del rma-br0 2>/dev/null || true
exit 0
