#!/usr/bin/env bash
# Makes N simulated hosts on this machine: network namespaces rma-h1..rma-hN, each with
# loopback and an eth0 on one bridge (10.77.0.<i>/24), so that what crosses between them
# crosses a network stack. Idempotent. Usage: bash ci/netns/up.sh [N]   (needs root)
# rma-run --hosts rma-h1,rma-h2 starts ranks in them, each with its own host name.
set -euo pipefail
n=${1:-2}
bash "$(dirname "$0")/down.sh" "$n"
ip link add rma-br0 type bridge
ip link set rma-br0 up
for i in $(seq 1 "$n"); do
  ns=rma-h$i
  ip netns add "$ns"
  ip link add "rma-v$i" type veth peer name eth0 netns "$ns"
  ip link set "rma-v$i" master rma-br0 up
  ip -n "$ns" addr add "10.77.0.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done
echo "simulated hosts: $(seq -s ' ' -f 'rma-h%g' 1 "$n")"
