#!/bin/bash
# Sets up Slurm (Debian's slurm-wlm, with munge) as a one-node cluster on this machine, as root, so that
# bench/launch_vs_slurm.py can run Slurm and torus side by side. Safe to run again; `bench/peer_slurm.sh stop`
# stops its daemons.
#
# The node offers 64 CPUs whatever the machine has (slurmd takes the configured count), so that `srun -n64` runs
# here as torus's 64 simulated chips do; processes are tracked through /proc and tasks are not confined (as
# torus's workers are not on a local cluster).
set -euo pipefail
if [[ ${1:-} == stop ]]; then
  for daemon in slurmd slurmctld munged; do
    pkill -x "$daemon" 2>/dev/null || true
    for _ in $(seq 1 100); do pgrep -x "$daemon" >/dev/null || break; sleep 0.1; done
  done
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "peer_slurm.sh: run as root (it installs packages and starts Slurm's daemons)" >&2
  exit 1
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi
node=$(hostname -s)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat >/etc/slurm/slurm.conf <<EOF
ClusterName=torus-peer
SlurmctldHost=${node}
SlurmUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=${node} CPUs=64 State=UNKNOWN
PartitionName=bench Nodes=${node} Default=YES MaxTime=INFINITE State=UP
EOF
if [[ ! -f /etc/munge/munge.key ]]; then
  head -c 1024 /dev/urandom >/etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi
chown -R munge: /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
pgrep -x munged >/dev/null || runuser -u munge -- munged
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 1 100); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    sinfo
    exit 0
  fi
  sleep 0.2
done
echo "peer_slurm.sh: Slurm's node did not become idle; see /var/log/slurm/" >&2
exit 1
