#!/usr/bin/env bash
# entrypoint.sh ctld|node|login: munged + slurmctld / slurmd / sshd in the foreground.
# /etc/slurm: the configs (rendered by tests/cluster/cluster.sh render-docker, mounted
# read-only); /munge-key: a volume through which the controller hands out the munge key;
# /cluster-keys (login only): the SSH host key and alice's authorized public key, made by
# scripts/slurm-cluster; /home: alice's home, a volume shared by login and compute nodes.
set -euo pipefail
role=${1:?usage: entrypoint.sh ctld|node|login}
export SLURM_CONF=/etc/slurm/slurm.conf
mkdir -p /var/lib/slurm-test/ctld /var/lib/slurm-test/spool /var/lib/slurm-test/run \
         /var/lib/slurm-test/log /run/munge /dev/fake-gpu
if [[ $role == ctld && ! -s /munge-key/munge.key ]]; then
  dd if=/dev/urandom of=/munge-key/munge.key.tmp bs=1024 count=1 status=none
  mv /munge-key/munge.key.tmp /munge-key/munge.key
fi
for _ in $(seq 600); do [[ -s /munge-key/munge.key ]] && break; sleep 0.1; done
[[ -s /munge-key/munge.key ]] || { echo "no munge key in /munge-key after 60 s" >&2; exit 1; }
install -m 0400 -o munge -g munge /munge-key/munge.key /etc/munge/munge.key
chown munge:munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0755 /run/munge
su -s /bin/sh munge -c 'munged --force' 2>/dev/null || munged --force
# fake GPUs, as on the netns cluster: character devices nobody opens (task/none)
for i in 0 1 2 3 4 5 6 7; do [[ -e /dev/fake-gpu/nvidia$i ]] || mknod /dev/fake-gpu/nvidia$i c 195 "$i"; done

init_home() { # alice's home on the shared volume: created once, by the login node
  if [[ ! -d /home/alice ]]; then
    mkdir -p /home/alice.tmp
    cp -a /etc/skel-alice/. /home/alice.tmp/
    chown -R alice:alice /home/alice.tmp
    chmod 0750 /home/alice.tmp
    mv /home/alice.tmp /home/alice
  fi
  install -d -m 0700 -o alice -g alice /home/alice/.ssh
  install -m 0600 -o alice -g alice /cluster-keys/alice.pub /home/alice/.ssh/authorized_keys
}

case $role in
  ctld) exec slurmctld -D -i -f "$SLURM_CONF" ;;
  node) exec slurmd -D -N "$(hostname -s)" -f "$SLURM_CONF" ;;
  login)
    init_home
    install -m 0600 /cluster-keys/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key
    install -m 0644 /cluster-keys/ssh_host_ed25519_key.pub /etc/ssh/ssh_host_ed25519_key.pub
    # public key + TOTP, 127.0.0.1:2222 (daemonizes); never the reason the login node is down
    /usr/sbin/sshd -f /etc/ssh/sshd_mfa_config || echo "the MFA sshd (port 2222) did not start" >&2
    exec /usr/sbin/sshd -D -e ;;
  *) echo "unknown role $role" >&2; exit 2 ;;
esac
