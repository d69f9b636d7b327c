#!/usr/bin/env bash
# Starts munge and a Slurm cluster of one or two nodes on this machine, in a folder of its
# own. Usage: source <(bash ci/slurm/start.sh DIR [NODES])  -- prints the exports to use.
# Facts from ../shared/design/launchers.md (measured on these machines): SlurmUser=root,
# auth/munge, proctrack/linuxproc, task/none, select/cons_tres, two slurmd with their own
# ports and TmpFS for two nodes on one host.
set -euo pipefail
dir=${1:?folder}
nodes=${2:-1}
# A cluster left running by an earlier run holds the same ports and would answer for
# this one (with its own spool and TmpFS: srun's PMI-2 then fails to reach the steps).
if pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null; then
  bash "$(dirname "$0")/stop.sh"
  for _ in $(seq 1 50); do
    pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break
    sleep 0.1
  done
fi
mkdir -p "$dir"/{state,spool,log,run}
# munge: the package made the key; its run folder must belong to munge.
mkdir -p /run/munge && chown munge:munge /run/munge
if ! pgrep -x munged >/dev/null; then
  runuser -u munge -- /usr/sbin/munged
fi
munge -n | unmunge >/dev/null
host=$(hostname)
cpus=8
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
conf="$dir/slurm.conf"
{
  echo "ClusterName=rma"
  echo "SlurmctldHost=$host(127.0.0.1)"
  echo "SlurmUser=root"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_Core"
  echo "MpiDefault=none"
  echo "AccountingStorageType=accounting_storage/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "StateSaveLocation=$dir/state"
  echo "SlurmdSpoolDir=$dir/spool/%n"
  echo "SlurmctldPidFile=$dir/run/slurmctld.pid"
  echo "SlurmdPidFile=$dir/run/slurmd-%n.pid"
  echo "SlurmctldLogFile=$dir/log/slurmctld.log"
  echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
  echo "SlurmctldPort=16817"
  echo "ReturnToService=2"
  echo "KillWait=5"
  echo "MaxTasksPerNode=64"
  # Tests run up to 8 ranks on 2 cores: declare 8 CPUs and let slurmd accept that.
  echo "SlurmdParameters=config_overrides"
  if [ "$nodes" = 1 ]; then
    echo "NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    echo "PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8"
  else
    # Each node's own temporary folder, or PMIx's servers collide on one.
    echo "TmpFS=$dir/tmpfs-%n"
    for n in 1 2; do
      mkdir -p "$dir/tmpfs-n$n" "$dir/spool/n$n"
      echo "NodeName=n$n NodeHostname=$host NodeAddr=127.0.0.1 Port=1700$n CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
    echo "PartitionName=main Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8"
  fi
} > "$conf"
mkdir -p "$dir/spool/$host"
export SLURM_CONF=$conf
setsid slurmctld -D -f "$conf" > "$dir/log/slurmctld.out" 2>&1 < /dev/null &
if [ "$nodes" = 1 ]; then
  setsid slurmd -D -f "$conf" > "$dir/log/slurmd.out" 2>&1 < /dev/null &
else
  for n in 1 2; do
    setsid slurmd -D -f "$conf" -N "n$n" > "$dir/log/slurmd-n$n.out" 2>&1 < /dev/null &
  done
fi
for _ in $(seq 1 100); do
  state=$(sinfo -h -o %T 2>/dev/null | sort -u | tr "\n" " " || true)
  case "$state" in
    "idle ") echo "export SLURM_CONF=$conf"; exit 0 ;;
  esac
  sleep 0.2
done
echo "Slurm did not become idle: $(sinfo 2>&1)" >&2
tail -5 "$dir"/log/*.log >&2 || true
exit 1
