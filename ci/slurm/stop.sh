#!/usr/bin/env bash
# Stops the Slurm daemons started by start.sh (munge stays: it is harmless).
pkill -x slurmd 2>/dev/null || true
pkill -x slurmctld 2>/dev/null || true
exit 0
