#!/usr/bin/env bash
# entrypoint.sh ctld|node: runs munged + slurmctld (ctld) or munged + slurmd (node) in the
# foreground. The configs come from `tests/cluster/cluster.sh render-docker`, mounted at
# /etc/slurm; the munge key is shared through the /munge-key volume (made by the ctld).
# UNTESTED on the project's machines (Docker does not run there).
set -euo pipefail
role=${1:?usage: entrypoint.sh ctld|node}
export SLURM_CONF=/etc/slurm/slurm.conf
mkdir -p /var/lib/slurm-test/ctld /var/lib/slurm-test/spool /var/lib/slurm-test/run \
         /var/lib/slurm-test/log /run/munge /dev/fake-gpu
if [[ $role == ctld && ! -s /munge-key/munge.key ]]; then
  dd if=/dev/urandom of=/munge-key/munge.key.tmp bs=1024 count=1 status=none
  mv /munge-key/munge.key.tmp /munge-key/munge.key
fi
for _ in $(seq 300); do [[ -s /munge-key/munge.key ]] && break; sleep 0.1; done
install -m 0400 /munge-key/munge.key /etc/munge/munge.key
chmod 0755 /run/munge
munged --force
# fake GPUs, as on the netns cluster: character devices nobody opens (task/none)
for i in 0 1 2 3 4 5 6 7; do [[ -e /dev/fake-gpu/nvidia$i ]] || mknod /dev/fake-gpu/nvidia$i c 195 $i; done
case $role in
  ctld) exec slurmctld -D -i -f "$SLURM_CONF" ;;
  node) exec slurmd -D -N "$(hostname -s)" -f "$SLURM_CONF" ;;
  *) echo "unknown role $role" >&2; exit 2 ;;
esac
