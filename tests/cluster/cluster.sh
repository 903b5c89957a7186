#!/usr/bin/env bash
# cluster.sh - a real, throw-away multi-node Slurm cluster on ONE Linux host, for tests.
#
#   cluster.sh start              munged + slurmctld + N slurmd "nodes"; waits until all IDLE
#   cluster.sh stop               stop everything this instance started; remove its netns/links
#   cluster.sh status             daemons of this instance + sinfo
#   cluster.sh env                print 'export SLURM_CONF=...'  (eval "$(cluster.sh env)")
#   cluster.sh wait-idle [SECS]   wait until every node is IDLE
#   cluster.sh kill-node NODE     node crash: SIGKILL every process in NODE's network namespace
#   cluster.sh start-node NODE    start NODE's slurmd again (after kill-node)
#   cluster.sh cut-node NODE      network partition: NODE's link down (its processes keep running)
#   cluster.sh heal-node NODE     NODE's link up again
#   cluster.sh restore            heal every link, restart dead slurmds, resume DOWN/DRAINED nodes
#   cluster.sh render-docker DIR  write the same configs for tests/cluster/docker-compose.yml
#
# Firewalls: where dockerd runs, the FORWARD policy is DROP; start adds an ACCEPT rule for
# traffic within this instance's bridge (FORWARD, and DOCKER-USER if it exists), stop removes it.
#
# Layout: munged and slurmctld run in the host's namespaces; each node's slurmd runs in
# a network namespace of its own (own address on a private bridge), with its own UTS
# hostname and its own /etc/hosts (bind mount in a private mount namespace). The munge
# socket is a filesystem path, so every namespace reaches it. The nodes have no default
# route: their traffic cannot leave the bridge. Topology: leaf1 = first half of the
# nodes, leaf2 = second half, spine above both. Partitions: batch (default) and high
# (PriorityTier 10), which preempts batch jobs with REQUEUE.
#
# Several instances may run on one host at once (concurrent test sessions): each has its
# own state dir, /24 network, netns/link prefix and slurmctld port, taken from the knobs
# below. `start` claims the network and port under a host-wide lock and exits 75 (busy)
# when another instance already has them. This script only ever signals PIDs it recorded
# (checked against /proc/PID/comm and its state dir in the command line) and processes
# inside the network namespaces it created itself.
#
# Needs root, iproute2, util-linux (nsenter, unshare, flock) and Debian's slurm-wlm + munge.
#
# Environment knobs (all optional; commands other than start reuse what start was given):
#   SLURM_TEST_STATE        state dir            (default <this dir>/state)
#   SLURM_TEST_NODES        number of nodes      (default 4)
#   SLURM_TEST_NET          /24 prefix, e.g. 10.199.77 (default); exists only on our bridge
#   SLURM_TEST_PREFIX       netns/link prefix, <= 5 chars (default lc<third octet of NET>)
#   SLURM_TEST_CTLD_PORT    slurmctld port on the host (default 6817)
#   SLURM_TEST_SLURMD_PORT  slurmd port inside each node's namespace (default 6818)
#   SLURM_TEST_CLUSTER      ClusterName (default testcl)
#   SLURM_TEST_CPUS (2)  SLURM_TEST_GPUS (2; fake gres/gpu per node, 0 = none)  SLURM_TEST_MEM_MB (1000)
#   SLURM_TEST_SLURMD_TIMEOUT (3)  SLURM_TEST_MSG_TIMEOUT (3)  SLURM_TEST_KILL_WAIT (5)
#     (measured here: a crashed or cut node is DOWN ~12 s later and its jobs requeued at once)
#   SLURM_TEST_CRED_EXPIRE (5: credential lifetime, also the delay before a requeued job may start again;
#     Slurm's default is 120)
#   SLURM_TEST_MIN_JOB_AGE (300)  SLURM_TEST_SCHED_PARAMS (bf_interval=2)  SLURM_TEST_DEBUG (info)
#   SLURM_TEST_START_TIMEOUT seconds to wait for all nodes IDLE (default 60)
#   SLURM_TEST_LOCK         host-wide lock file for claiming nets/ports (default /run/lock/launcher-slurm-test.lock)
#   SLURM_TEST_TOPOLOGY     tree (default: leaf1/leaf2/spine) or block (Slurm >= 23.11: one block per
#                           half of the nodes, BlockSizes = half)
#   SLURM_TEST_SLURM_MAJOR  Slurm major version the configs are for (default: this host's slurmd -V)
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin # munged, slurmctld, slurmd, ip live there

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE=${SLURM_TEST_STATE:-$HERE/state}
CMD=${1:-}

if [[ $CMD != start && $CMD != render-docker && -r $STATE/cluster.env ]]; then
  # shellcheck disable=SC1091
  source "$STATE/cluster.env"
fi
NNODES=${NNODES:-${SLURM_TEST_NODES:-4}}
NET=${NET:-${SLURM_TEST_NET:-10.199.77}}
PFX=${PFX:-${SLURM_TEST_PREFIX:-lc${NET##*.}}}
CTLD_PORT=${CTLD_PORT:-${SLURM_TEST_CTLD_PORT:-6817}}
SLURMD_PORT=${SLURMD_PORT:-${SLURM_TEST_SLURMD_PORT:-6818}}
CLUSTER=${SLURM_TEST_CLUSTER:-testcl}
NODE_CPUS=${SLURM_TEST_CPUS:-2}
NODE_GPUS=${SLURM_TEST_GPUS:-2}
NODE_MEM=${SLURM_TEST_MEM_MB:-1000}
SLURMD_TIMEOUT=${SLURM_TEST_SLURMD_TIMEOUT:-3}
MSG_TIMEOUT=${SLURM_TEST_MSG_TIMEOUT:-3}
KILL_WAIT=${SLURM_TEST_KILL_WAIT:-5}
CRED_EXPIRE=${SLURM_TEST_CRED_EXPIRE:-5}
MIN_JOB_AGE=${SLURM_TEST_MIN_JOB_AGE:-300}
SCHED_PARAMS=${SLURM_TEST_SCHED_PARAMS:-bf_interval=2}
DEBUG=${SLURM_TEST_DEBUG:-info}
START_TIMEOUT=${SLURM_TEST_START_TIMEOUT:-60}
LOCK=${SLURM_TEST_LOCK:-/run/lock/launcher-slurm-test.lock}
TOPOLOGY=${SLURM_TEST_TOPOLOGY:-tree}

BR=${PFX}br0
CTL_ADDR=$NET.1
CONF_DIR=$STATE/etc
CONF=$CONF_DIR/slurm.conf
RUN=$STATE/run
LOG=$STATE/log
MUNGE_DIR=$STATE/munge
export SLURM_CONF=$CONF
EX_BUSY=75   # network, prefix or port already taken by someone else: pick others and retry

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
log() { echo "[cluster.sh $(date +%T.%3N) $PFX] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
busy() { log "BUSY: $*"; exit $EX_BUSY; }
node_name() { echo "node$1"; }
node_ns() { echo "${PFX}-node$1"; }
node_ip() { echo "$NET.$((10 + $1))"; }
node_idx() {
  local n=${1#node}
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= NNODES)) || die "no node '$1' (nodes are node1..node$NNODES)"
  echo "$n"
}
need_running() { [[ -e $RUN/net.claimed ]] || die "no cluster running with state dir $STATE (cluster.sh start first)"; }

validate_knobs() {
  [[ $NET =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] || die "SLURM_TEST_NET must be a /24 prefix like 10.199.77, got '$NET'"
  [[ $PFX =~ ^[a-z][a-z0-9]{0,4}$ ]] || die "SLURM_TEST_PREFIX must be 1-5 lowercase letters/digits, got '$PFX'"
  [[ $NNODES =~ ^[0-9]+$ ]] && ((NNODES >= 1 && NNODES <= 200)) || die "SLURM_TEST_NODES must be 1..200"
  [[ $CTLD_PORT =~ ^[0-9]+$ && $SLURMD_PORT =~ ^[0-9]+$ ]] || die "ports must be numbers"
  ((${#STATE} <= 80)) || die "state dir path too long for the munge socket (max 80 chars): $STATE"
}

# ---- PIDs: only ever signal what we recorded ------------------------------------
pid_alive() { # pidfile expected-comm
  local f=$1 comm=$2 pid
  [[ -s $f ]] || return 1
  pid=$(<"$f")
  [[ -r /proc/$pid/comm ]] && [[ $(<"/proc/$pid/comm") == "$comm"* ]] &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$STATE/"
}
running() { # pid: exists and is not a zombie (our own children stay zombies until reaped)
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st%% *}
  [[ -n $st && $st != Z ]]
}
ns_exists() { [[ -e /run/netns/$1 ]]; }
kill_netns_procs() { # SIGKILL everything inside one of OUR node namespaces (= node crash)
  local ns=$1 pids
  ns_exists "$ns" || return 0
  for _ in $(seq 25); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z $pids ]] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  log "WARNING: processes left in $ns: $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
}

# ---- config ---------------------------------------------------------------------
# render_conf OUT_DIR STATE_DIR CTL_HOST CTL_ADDR MUNGE_SOCKET DEV_DIR NODE_ADDR_MODE(netns|docker)
render_conf() {
  local out=$1 st=$2 ctl_host=$3 ctl_addr=$4 msock=$5 devdir=$6 mode=$7
  local half=$(((NNODES + 1) / 2)) i gres_types="" gres=""
  mkdir -p "$out"
  if ((NODE_GPUS > 0)); then gres_types="GresTypes=gpu"; gres="Gres=gpu:$NODE_GPUS"; fi
  sed -e "s|@CLUSTER@|$CLUSTER|g" -e "s|@CTL_HOST@|$ctl_host|g" -e "s|@CTL_ADDR@|$ctl_addr|g" \
    -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" -e "s|@STATE@|$st|g" \
    -e "s|@MUNGE_SOCKET@|$msock|g" -e "s|@DEBUG@|$DEBUG|g" -e "s|@SLURMD_TIMEOUT@|$SLURMD_TIMEOUT|g" \
    -e "s|@MSG_TIMEOUT@|$MSG_TIMEOUT|g" -e "s|@KILL_WAIT@|$KILL_WAIT|g" -e "s|@MIN_JOB_AGE@|$MIN_JOB_AGE|g" \
    -e "s|@GRES_TYPES@|$gres_types|g" -e "s|@SCHED_PARAMS@|$SCHED_PARAMS|g" -e "s|@CRED_EXPIRE@|$CRED_EXPIRE|g" \
    -e "s|@TOPOLOGY_PLUGIN@|topology/$TOPOLOGY|g" \
    "$HERE/slurm.conf.in" >"$out/slurm.conf"
  {
    echo
    echo "# ---- nodes and partitions, generated by cluster.sh"
    for ((i = 1; i <= NNODES; i++)); do
      if [[ $mode == netns ]]; then
        echo -n "NodeName=$(node_name "$i") NodeHostname=$(node_name "$i") NodeAddr=$(node_ip "$i") "
      else
        echo -n "NodeName=$(node_name "$i") NodeHostname=$(node_name "$i") "
      fi
      echo "CPUs=$NODE_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$NODE_CPUS ThreadsPerCore=1" \
        "RealMemory=$NODE_MEM $gres State=UNKNOWN"
    done
    echo "PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE"
    echo "PartitionName=high  Nodes=ALL Default=NO  MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF"
  } >>"$out/slurm.conf"
  if [[ $TOPOLOGY == block ]]; then
    {
      echo "# generated by cluster.sh: two blocks (topology/block, Slurm >= 23.11)"
      echo "BlockName=block1 Nodes=node[1-$half]"
      ((NNODES > half)) && echo "BlockName=block2 Nodes=node[$((half + 1))-$NNODES]"
      echo "BlockSizes=$half"
    } >"$out/topology.conf"
  else
    {
      echo "# generated by cluster.sh: two leaf switches + spine"
      echo "SwitchName=leaf1 Nodes=node[1-$half]"
      if ((NNODES > half)); then
        echo "SwitchName=leaf2 Nodes=node[$((half + 1))-$NNODES]"
        echo "SwitchName=spine Switches=leaf[1-2]"
      else
        echo "SwitchName=spine Switches=leaf1"
      fi
    } >"$out/topology.conf"
  fi
  if ((NODE_GPUS > 0)); then
    # Fake GPUs: gres/gpu File= must name character devices (count-only lines were
    # reported as 0 by slurmd 22.05 -> node INVAL). Nothing opens them (task/none).
    echo "NodeName=node[1-$NNODES] Name=gpu File=$devdir/nvidia[0-$((NODE_GPUS - 1))]" >"$out/gres.conf"
  else
    rm -f "$out/gres.conf"
  fi
  # slurmd always initialises a cgroup plugin, even with proctrack/linuxproc + task/none
  local major
  major=${SLURM_TEST_SLURM_MAJOR:-$(slurmd -V 2>/dev/null | sed -n 's/^slurm[^0-9]*\([0-9]*\)\..*/\1/p' || true)}
  if [[ ${major:-0} -ge 24 ]]; then
    echo "CgroupPlugin=disabled" >"$out/cgroup.conf"
  elif [[ $mode == netns && $(stat -fc %T /sys/fs/cgroup 2>/dev/null) == cgroup2fs ]]; then
    # pure cgroup v2 host (untested on these machines, which are v1/hybrid)
    printf 'CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n' >"$out/cgroup.conf"
  else
    rm -f "$out/cgroup.conf" # autodetect
  fi
}

make_fake_gpus() { # dir
  local d=$1 i
  mkdir -p "$d"
  for ((i = 0; i < NODE_GPUS; i++)); do
    rm -f "$d/nvidia$i"
    mknod "$d/nvidia$i" c 195 "$i" 2>/dev/null || ln -s /dev/null "$d/nvidia$i"
  done
}

# ---- munge ----------------------------------------------------------------------
start_munge() {
  mkdir -p "$MUNGE_DIR"
  chmod 0755 "$MUNGE_DIR" # the socket must be reachable by every job user; the key stays 0400
  [[ -s $MUNGE_DIR/munge.key ]] || dd if=/dev/urandom of="$MUNGE_DIR/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$MUNGE_DIR/munge.key"
  munged -F --force --socket="$MUNGE_DIR/munge.socket.2" --key-file="$MUNGE_DIR/munge.key" \
    --log-file="$LOG/munged.log" --pid-file="$MUNGE_DIR/munged.pid.internal" \
    --seed-file="$MUNGE_DIR/munged.seed" >>"$LOG/munged.out" 2>&1 9>&- &
  echo $! >"$RUN/munged.pid"
  for _ in $(seq 100); do [[ -S $MUNGE_DIR/munge.socket.2 ]] && break; sleep 0.05; done
  [[ -S $MUNGE_DIR/munge.socket.2 ]] || die "munged did not start (see $LOG/munged.log)"
  munge -n -S "$MUNGE_DIR/munge.socket.2" | unmunge -S "$MUNGE_DIR/munge.socket.2" >/dev/null ||
    die "munge self-test failed (see $LOG/munged.log)"
}

# ---- network: claim (under the host-wide lock), create, remove --------------------
check_free() {
  local r
  ns_exists "${PFX}-node1" && busy "network namespace ${PFX}-node1 exists (prefix $PFX in use)"
  ip link show "$BR" >/dev/null 2>&1 && busy "link $BR exists (prefix $PFX in use)"
  ip -o addr | grep -qF " $CTL_ADDR/" && busy "$CTL_ADDR is already an address of this host"
  # any route (but the default route) that covers NET.0/24: someone's real network
  r=$(ip -4 route show match "$NET.0/24" 2>/dev/null | grep -v '^default' || true)
  [[ -z $r ]] || busy "$NET.0/24 overlaps a route of this host: $r"
  ss -Hltn "sport = :$CTLD_PORT" 2>/dev/null | grep -q . && busy "port $CTLD_PORT is in use"
  return 0
}
net_up() {
  touch "$RUN/net.claimed" # from here on, stop removes ${PFX}-* namespaces and links
  ip link add "$BR" type bridge
  ip addr add "$CTL_ADDR/24" dev "$BR"
  ip link set "$BR" up
  fw_up
  local i j ns n
  mkdir -p "$STATE/hosts"
  for ((i = 1; i <= NNODES; i++)); do
    ns=$(node_ns "$i"); n=$(node_name "$i")
    ip netns add "$ns"
    ip link add "${PFX}-n$i" type veth peer name "${PFX}-n${i}c"
    ip link set "${PFX}-n${i}c" netns "$ns"
    ip -n "$ns" link set "${PFX}-n${i}c" name eth0
    ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip link set "${PFX}-n$i" master "$BR" up
    # no default route on purpose: nothing a job does can leave the bridge
    {
      echo "127.0.0.1 localhost"
      echo "$(node_ip "$i") $n"
      echo "$CTL_ADDR $(hostname -s) ctl"
      for ((j = 1; j <= NNODES; j++)); do ((j == i)) || echo "$(node_ip "$j") $(node_name "$j")"; done
    } >"$STATE/hosts/$n"
  done
}
# Docker (and other firewalls) may set the FORWARD policy to DROP and load br_netfilter:
# then node-to-node traffic on our bridge (srun steps) is dropped while sinfo still works.
# Our own ACCEPT rule for traffic within our bridge, in FORWARD and (if present) DOCKER-USER,
# checked first; each rule added is recorded in $RUN/iptables.rules and removed by stop.
fw_rule() { echo "-i $BR -o $BR -m comment --comment launcher-slurm-test:$PFX -j ACCEPT"; }
fw_up() {
  command -v iptables >/dev/null || return 0
  local chain
  : >"$RUN/iptables.rules"
  for chain in FORWARD DOCKER-USER; do
    iptables -n -L "$chain" >/dev/null 2>&1 || continue
    # shellcheck disable=SC2046
    if iptables -I "$chain" 1 $(fw_rule) 2>>"$LOG/iptables.err"; then
      echo "$chain" >>"$RUN/iptables.rules"
    else
      log "WARNING: could not add an iptables ACCEPT rule for $BR to $chain (see $LOG/iptables.err)"
    fi
  done
}
fw_down() {
  [[ -s $RUN/iptables.rules ]] || return 0
  local chain
  while read -r chain; do
    # shellcheck disable=SC2046
    iptables -D "$chain" $(fw_rule) 2>/dev/null || true
  done <"$RUN/iptables.rules"
  rm -f "$RUN/iptables.rules"
}

net_down() {
  [[ -e $RUN/net.claimed ]] || return 0 # never touch namespaces another instance may own
  fw_down
  local i l
  for ((i = 1; i <= NNODES; i++)); do
    kill_netns_procs "$(node_ns "$i")"
    ip netns del "$(node_ns "$i")" 2>/dev/null || true
  done
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^${PFX}-n[0-9]+$" || true); do
    ip link del "$l" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
  rm -f "$RUN/net.claimed"
}

# ---- daemons --------------------------------------------------------------------
start_slurmd() { # index
  local i=$1 n ns
  n=$(node_name "$i"); ns=$(node_ns "$i")
  mkdir -p "$STATE/spool/$n"
  # NOT `ip netns exec`: it remounts /sys, hiding /sys/fs/cgroup, and slurmd 22.05 always
  # initialises its cgroup plugin. nsenter(net) -> unshare(mount+uts) -> sh -> exec slurmd:
  # every step execs, so $! is slurmd's PID.
  nsenter --net="/run/netns/$ns" -- unshare --mount --uts --propagation private \
    sh -c "mount --bind '$STATE/hosts/$n' /etc/hosts && hostname '$n' && exec slurmd -D -N '$n' -f '$CONF'" \
    >>"$LOG/slurmd-$n.out" 2>&1 9>&- &
  echo $! >"$RUN/slurmd-$n.pid.sh"
}
node_states() { sinfo -h -N -p batch -o '%N %T' 2>/dev/null || true; }
wait_all_idle() { # timeout
  local deadline states
  deadline=$(($(date +%s) + $1))
  while :; do
    states=$(node_states | awk '{print $2}' | sort | uniq -c | tr -s ' ' || true)
    [[ $states == " $NNODES idle" ]] && return 0
    (($(date +%s) >= deadline)) && { log "timeout waiting for all nodes IDLE:$states"; sinfo -N -l >&2 || true; return 1; }
    sleep 0.2
  done
}

cmd_start() {
  local t0 b i
  t0=$(now)
  validate_knobs
  [[ $(id -u) == 0 ]] || die "needs root (network namespaces, mknod, munged)"
  for b in munged munge unmunge slurmctld slurmd sinfo scontrol ip ss unshare nsenter flock mknod; do
    command -v "$b" >/dev/null || die "missing command '$b' (apt-get install slurm-wlm munge iproute2 util-linux)"
  done
  if pid_alive "$RUN/slurmctld.pid.sh" slurmctld; then die "already running with state dir $STATE (cluster.sh stop first)"; fi
  mkdir -p "$STATE" "$(dirname "$LOCK")"
  # fresh cluster every start (job ids restart at 1); the munge key is kept
  rm -rf "$STATE/ctld" "$STATE/spool" "$LOG" "$RUN" "$STATE/jobcomp.txt" "$CONF_DIR" "$STATE/hosts" "$STATE/dev"
  mkdir -p "$STATE/ctld" "$STATE/spool" "$LOG" "$RUN" "$STATE/shared"
  chmod 1777 "$STATE/shared"
  make_fake_gpus "$STATE/dev"
  render_conf "$CONF_DIR" "$STATE" "$(hostname -s)" "$CTL_ADDR" "$MUNGE_DIR/munge.socket.2" "$STATE/dev" netns
  declare -p NNODES NET PFX CTLD_PORT SLURMD_PORT >"$STATE/cluster.env"

  # claim network + port atomically with respect to other instances on this host
  exec 9>>"$LOCK"
  flock -w 120 9 || die "could not take $LOCK within 120 s"
  check_free
  # from here on, a failed start tears down whatever it had started
  trap 'rc=$?; if ((rc)); then log "start failed (rc=$rc): stopping what was started"; cmd_stop || true; fi' EXIT
  start_munge
  net_up
  slurmctld -D -i -f "$CONF" >>"$LOG/slurmctld.out" 2>&1 9>&- &
  local ctld=$!
  echo "$ctld" >"$RUN/slurmctld.pid.sh"
  for _ in $(seq 200); do
    scontrol ping 2>/dev/null | grep -q UP && break
    running "$ctld" || die "slurmctld exited at once:"$'\n'"$(tail -n 5 "$LOG/slurmctld.out" 2>/dev/null)"
    sleep 0.05
  done
  scontrol ping 2>/dev/null | grep -q UP || die "slurmctld does not answer on port $CTLD_PORT (see $LOG/slurmctld.log)"
  exec 9>&- # port and network are ours now
  for ((i = 1; i <= NNODES; i++)); do start_slurmd "$i"; done
  wait_all_idle "$START_TIMEOUT" || die "cluster did not come up; logs in $LOG"
  trap - EXIT
  log "up: $NNODES nodes IDLE in $(since "$t0") s (net $NET.0/24, ctld port $CTLD_PORT); export SLURM_CONF=$CONF"
}

cmd_stop() {
  local t0 f pid i alive pids=() kpids=()
  t0=$(now)
  # SIGTERM slurmctld and munged together; their state is thrown away, so after a short
  # grace SIGKILL (slurmctld idles ~3 s joining threads after saving, munged ~2 s)
  for f in "$RUN/slurmctld.pid.sh:slurmctld" "$RUN/munged.pid:munged"; do
    if pid_alive "${f%%:*}" "${f##*:}"; then pid=$(<"${f%%:*}"); pids+=("$pid"); kill -TERM "$pid" 2>/dev/null || true; fi
  done
  # nodes: SIGKILL slurmd, slurmstepd and job processes alike (all live in our namespaces)
  if [[ -e $RUN/net.claimed ]]; then
    for ((i = 1; i <= NNODES; i++)); do kill_netns_procs "$(node_ns "$i")" & kpids+=($!); done
    wait "${kpids[@]}" 2>/dev/null || true
  fi
  for ((i = 1; i <= NNODES; i++)); do
    if pid_alive "$RUN/slurmd-node$i.pid.sh" slurmd; then kill -KILL "$(<"$RUN/slurmd-node$i.pid.sh")" 2>/dev/null || true; fi
  done
  for ((i = 0; i < 60; i++)); do
    alive=0
    for pid in "${pids[@]}"; do [[ -d /proc/$pid ]] && alive=1; done
    ((alive)) || break
    ((i == 10)) && for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    sleep 0.1
  done
  rm -f "$RUN"/*.pid "$RUN"/*.pid.sh 2>/dev/null || true
  net_down
  log "stopped in $(since "$t0") s"
}

cmd_status() {
  local f rc=0 name
  [[ -e $RUN/slurmctld.pid.sh ]] || { echo "not running (state dir $STATE)"; return 3; }
  for f in munged.pid slurmctld.pid.sh; do
    name=${f%%.pid*}
    if pid_alive "$RUN/$f" "$name"; then echo "$name pid $(<"$RUN/$f") running"; else echo "$name DEAD"; rc=1; fi
  done
  for ((i = 1; i <= NNODES; i++)); do
    f=$RUN/slurmd-node$i.pid.sh
    if pid_alive "$f" slurmd; then echo -n "node$i slurmd pid $(<"$f") running"; else echo -n "node$i slurmd DOWN"; fi
    if [[ $(cat "/sys/class/net/${PFX}-n$i/operstate" 2>/dev/null) == down ]]; then echo ", link CUT"; else echo; fi
  done
  [[ -s $RUN/iptables.rules ]] && echo "iptables: ACCEPT within $BR in $(tr '\n' ' ' <"$RUN/iptables.rules")"
  sinfo 2>&1 || rc=1
  return $rc
}

cmd_restore() {
  need_running
  local i n revived=0
  for ((i = 1; i <= NNODES; i++)); do
    n=$(node_name "$i")
    ip link set "${PFX}-n$i" up 2>/dev/null || true
    if ! pid_alive "$RUN/slurmd-$n.pid.sh" slurmd; then
      # leftovers of a half-dead node (e.g. slurmstepd without slurmd) would confuse the new slurmd
      kill_netns_procs "$(node_ns "$i")"
      start_slurmd "$i"
      revived=1
    fi
  done
  ((revived)) && sleep 0.5
  # nodes that were DOWN/DRAINED and whose slurmd is alive again: back into service
  node_states | awk '$2 ~ /^(down|drain|drained|draining|fail)/ {print $1}' | while read -r n; do
    scontrol update NodeName="$n" State=RESUME >/dev/null 2>&1 || true
  done
}

cmd_render_docker() {
  local out=${1:-$HERE/state/docker-etc}
  # inside the containers: state in /var/lib/slurm-test, munge on its default socket,
  # nodes and controller found by their compose service names
  render_conf "$out" /var/lib/slurm-test slurmctld slurmctld /run/munge/munge.socket.2 /dev/fake-gpu docker
  sed -i 's/^SlurmctldHost=.*/SlurmctldHost=slurmctld/' "$out/slurm.conf"
  # cgroup.conf: render_conf wrote CgroupPlugin=disabled for Slurm >= 24 (SLURM_TEST_SLURM_MAJOR);
  # older slurmds autodetect the container's cgroup v1 / v2
  [[ ${SLURM_TEST_SLURM_MAJOR:-0} -ge 24 ]] || rm -f "$out/cgroup.conf"
  log "docker configs for $NNODES nodes written to $out"
}

case $CMD in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  wait-idle) need_running; wait_all_idle "${2:-$START_TIMEOUT}" ;;
  kill-node)
    need_running; i=$(node_idx "${2:-}")
    kill_netns_procs "$(node_ns "$i")"
    rm -f "$RUN/slurmd-node$i.pid.sh"
    log "node$i crashed (every process in its namespace SIGKILLed)" ;;
  start-node)
    need_running; i=$(node_idx "${2:-}")
    pid_alive "$RUN/slurmd-node$i.pid.sh" slurmd && die "node$i: slurmd already running"
    start_slurmd "$i"
    log "node$i: slurmd started" ;;
  cut-node) need_running; i=$(node_idx "${2:-}"); ip link set "${PFX}-n$i" down; log "node$i: link cut" ;;
  heal-node) need_running; i=$(node_idx "${2:-}"); ip link set "${PFX}-n$i" up; log "node$i: link healed" ;;
  restore) cmd_restore ;;
  render-docker) cmd_render_docker "${2:-}" ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
