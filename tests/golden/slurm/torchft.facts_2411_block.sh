#!/bin/bash
#SBATCH --job-name=torchft
#SBATCH --comment=launcher:basic-abc123:1
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:h100:1
#SBATCH --segment=2
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --signal=B:USR1@120
#SBATCH --output=/state/jobs/basic-abc123/slurm-%j.out
#
# launcher job basic-abc123 (dedupe token launcher:basic-abc123:1); rendered for target testcl
set -uo pipefail
# A job submitted over SSH inherits SSH_CLIENT, and Debian's bash then reads ~/.bashrc in every
# `bash -c` of the job: the login banner would land in the job's log.
unset SSH_CLIENT SSH2_CLIENT SSH_CONNECTION SSH_TTY
export LAUNCHER_JOB_ID=basic-abc123
export LAUNCHER_JOB_NAME=torchft
export LAUNCHER_BACKEND=slurm
export LAUNCHER_JOB_DIR=/state/jobs/basic-abc123
# programs import launcher.jobside from here where launcher is not installed on the nodes
export LAUNCHER_JOB_PYZ=/state/jobs/basic-abc123/launcher_job.pyz
# the attempt, +1 on every restart in place (a requeue); the checkpoint generation is the helper's: LAUNCHER_GENERATION
export LAUNCHER_ATTEMPT=$(( 1 + ${SLURM_RESTART_COUNT:-0} ))
export LAUNCHER_NUM_NODES="${SLURM_JOB_NUM_NODES:-1}"
export LAUNCHER_GPUS_PER_NODE=1
export LAUNCHER_TASKS_PER_NODE=1
export LAUNCHER_PREEMPT_SIGNAL=USR1
export LAUNCHER_NODE_HOSTS="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)"
export MASTER_ADDR="${LAUNCHER_NODE_HOSTS%%,*}"
export MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 20000 ))
export LAUNCHER_SELF_ID="$SLURM_JOB_ID"
export LAUNCHER_REQUEUE_CMD="scontrol requeue $LAUNCHER_SELF_ID"
export LAUNCHER_SCHEDULER_VARS='SLURM_JOB_ID SLURM_RESTART_COUNT SLURM_JOB_NODELIST'
# this attempt's start is claimed once (create-only, with this job's id): a duplicate
# submission of the same attempt stands down here, before any user code (a Slurm requeue
# of this very job holds the same id and goes on)
python3 /state/jobs/basic-abc123/launcher_job.pyz start-claim --job-dir "$LAUNCHER_JOB_DIR" --attempt 1 --self "$LAUNCHER_SELF_ID" || exit $?
# rank order from the topology: each block's (topology/block) or leaf switch's (topology/tree)
# nodes get consecutive ranks, in hostname order within it, and groups of layout.group_nodes
# consecutive ranks cross a block as rarely as the allocation allows; MASTER_ADDR is rank 0. Sets
# LAUNCHER_NODE_HOSTS in that order and LAUNCHER_NODE_ORDER (launcher_backends.slurm.nodeorder)
eval "$(python3 /state/jobs/basic-abc123/launcher_job.pyz node-order)"
# run by every task: its node's rank, block and the job's nodes in that block, looked up by its
# node name in LAUNCHER_NODE_ORDER ("host=rank:block:nodes ..."); without one (a one-node job)
# rank SLURM_NODEID and no block. PET_NODE_RANK is torchrun's --node-rank.
_launcher_node_env() {
  local e=" ${LAUNCHER_NODE_ORDER:-} "
  e="${e#* "$SLURMD_NODENAME"=}"; e="${e%% *}"
  [ -n "$e" ] || e="$SLURM_NODEID::1"
  export LAUNCHER_NODE_RANK="${e%%:*}" LAUNCHER_NODES_PER_BLOCK="${e##*:}"
  e="${e#*:}"
  export LAUNCHER_NODE_BLOCK="${e%:*}" PET_NODE_RANK="$LAUNCHER_NODE_RANK"
}
export -f _launcher_node_env
echo "launcher: start $LAUNCHER_ATTEMPT of $LAUNCHER_JOB_ID on $SLURM_JOB_NODELIST (restart ${SLURM_RESTART_COUNT:-0})" >&2
# Resolve the latest COMMITTED checkpoint at every start of the job (requeues rerun
# this script), bump the generation, and export LAUNCHER_GENERATION and LAUNCHER_RESUME_FROM / _STEP.
export LAUNCHER_CKPT_ROOT=/shared/ckpt/torchft
export LAUNCHER_CKPT_KEEP=3
if ! _launcher_resume="$(python3 /state/jobs/basic-abc123/launcher_job.pyz resume-env --root "$LAUNCHER_CKPT_ROOT" --job-id "$LAUNCHER_JOB_ID" --attempt-hint "$LAUNCHER_ATTEMPT")"; then
  echo "launcher: could not resolve the checkpoint to resume from (root $LAUNCHER_CKPT_ROOT)" >&2
  exit 3
fi
eval "$_launcher_resume"
echo "launcher: attempt $LAUNCHER_ATTEMPT (checkpoint generation $LAUNCHER_GENERATION) resuming from ${LAUNCHER_RESUME_FROM:-<fresh start>}" >&2
# keep away from nodes that failed this job repeatedly (requeues itself if it holds one)
python3 /state/jobs/basic-abc123/launcher_job.pyz node-guard --job-dir "$LAUNCHER_JOB_DIR" || exit 0
# run: on every node (1 task(s) per node). The shells in between
# ignore the notice signal and exec the run, so a one-command run *is* the task process
# and gets the notice and TERM itself (a program installs its own handler over the
# ignored disposition). In a multi-line run, put `exec` before the main program.
export LAUNCHER_RUN='python3 train_ddp.py --steps 100'
# torchft (recovery.in_job kind torchft, docs/in-job-recovery.md): its lighthouse runs beside this
# script on $SLURMD_NODENAME, for the whole allocation. Each task's replica group: one per topology block
# (LAUNCHER_NODE_BLOCK keeps its name), REPLICA_GROUP_ID 0..NUM_REPLICA_GROUPS-1 in the blocks'
# rank order (LAUNCHER_NODE_ORDER); without blocks, one per node (its rank)
_launcher_replica_group() {
  local e b seen=" " n=0 id="" h r=0 i=0
  if [ -n "${REPLICA_GROUP_ID:-}" ] && [ -n "${NUM_REPLICA_GROUPS:-}" ]; then
    id=$REPLICA_GROUP_ID n=$NUM_REPLICA_GROUPS   # set by the step that runs this group alone
  elif [ -n "${LAUNCHER_NODE_BLOCK:-}" ]; then
    for e in ${LAUNCHER_NODE_ORDER:-}; do
      b="${e#*=}"; b="${b#*:}"; b="${b%:*}"
      case "$seen" in *" $b "*) continue ;; esac
      seen="$seen$b "
      [ "$b" != "$LAUNCHER_NODE_BLOCK" ] || id=$n
      n=$(( n + 1 ))
    done
  fi
  [ -n "$id" ] || { id="$LAUNCHER_NODE_RANK"; n="$LAUNCHER_NUM_NODES"; }
  export REPLICA_GROUP_ID="$id" NUM_REPLICA_GROUPS="$n"
  # the group is a torch.distributed world of its own: its first node is its MASTER_ADDR, its port
  # MASTER_PORT + 1 + the group's id, and PET_NODE_RANK / PET_NNODES (torchrun's --node-rank /
  # --nnodes) and LAUNCHER_GROUP_RANK / LAUNCHER_GROUP_WORLD_SIZE count within the group
  [ -n "${LAUNCHER_REPLICA_GROUP_HOSTS:-}" ] || return 0
  for h in ${LAUNCHER_REPLICA_GROUP_HOSTS//,/ }; do [ "$h" != "$SLURMD_NODENAME" ] || r=$i; i=$(( i + 1 )); done
  export MASTER_ADDR="${LAUNCHER_REPLICA_GROUP_HOSTS%%,*}" MASTER_PORT=$(( MASTER_PORT + 1 + id )) \
    PET_NODE_RANK=$r PET_NNODES=$i LAUNCHER_GROUP_RANK=$(( r * LAUNCHER_TASKS_PER_NODE + ${LAUNCHER_LOCAL_RANK:-0} )) \
    LAUNCHER_GROUP_WORLD_SIZE=$(( i * LAUNCHER_TASKS_PER_NODE ))
}
export -f _launcher_replica_group
export TORCHFT_LIGHTHOUSE="http://$SLURMD_NODENAME:$(( MASTER_PORT + 20000 ))"
torchft_lighthouse --min_replicas 1 --bind "[::]:$(( MASTER_PORT + 20000 ))" --join_timeout_ms 10000 --quorum_tick_ms 100 >> "$LAUNCHER_JOB_DIR/lighthouse-$LAUNCHER_ATTEMPT.log" 2>&1 &
_launcher_lighthouse=$!
trap 'kill "$_launcher_lighthouse" 2>/dev/null' EXIT
# A job being ended (scancel, `launcher cancel`, its time limit) signals this shell with TERM
# and leaves RUNNING: _launcher_ending. A notice sets _launcher_noticed.
_launcher_noticed= _launcher_ending=
_launcher_requeue() {
  # Requeue this job in place (same ids) when it still runs, or is being ended by its time
  # limit (the run saved: go on in a new allocation); never when it is being cancelled:
  # `scontrol requeue` would bring back even a cancelled job (measured on 22.05), e.g. one
  # cancelled while its program was saving on the notice. While a job is being ended
  # scontrol says COMPLETING, with Reason=TimeLimit only for the time limit.
  local job state reason
  job=$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null)
  state=$(printf '%s' "$job" | grep -o ' JobState=[A-Z_]*' | cut -d= -f2)
  reason=$(printf '%s' "$job" | grep -o ' Reason=[^ ]*' | cut -d= -f2)
  if [ "$reason" != TimeLimit ] && { [ -n "$_launcher_ending" ] || [ "$state" != RUNNING ]; }; then
    echo "launcher: $1, but the job is being ended (${state:-unknown to scontrol}${_launcher_ending:+, TERM received}): no requeue" >&2
    return 0
  fi
  echo "launcher: $1; requeueing $SLURM_JOB_ID" >&2
  scontrol requeue "$SLURM_JOB_ID"
}
_launcher_on_notice() {
  # Preemption notice or time limit near (--signal=B:USR1@grace): forward the
  # signal to the program (job steps only, not this shell), give it up to the grace
  # to commit a checkpoint, then requeue ourselves if it made progress. This is how a
  # job outlives its time limit and preemption with no process on the login node.
  echo "launcher: $1 received: asking the program to checkpoint" >&2
  _launcher_noticed=1
  local since
  since=$(python3 /state/jobs/basic-abc123/launcher_job.pyz latest --root "$LAUNCHER_CKPT_ROOT" --step 2>/dev/null) || since=-1
  scancel --signal=USR1 "$SLURM_JOB_ID" 2>/dev/null || true
  if python3 /state/jobs/basic-abc123/launcher_job.pyz wait-commit --root "$LAUNCHER_CKPT_ROOT" --since-step "$since" --timeout 96 >/dev/null; then
    _launcher_requeue "checkpoint committed on notice"
  elif [ "$since" -gt "${LAUNCHER_RESUME_STEP:--1}" ]; then
    _launcher_requeue "no checkpoint on notice, but progress committed since the start (step $since)"
  else
    echo "launcher: no new committed checkpoint since the start; not requeueing" >&2
  fi
}
trap '_launcher_on_notice USR1' USR1
# TERM (scancel, preemption): the steps get it from Slurm directly; this shell keeps
# waiting for them so their exit (and any last checkpoint) is not cut short.
trap '_launcher_ending=1; echo "launcher: TERM received" >&2' TERM
# torchft: one srun step per replica group (its nodes in rank order, from LAUNCHER_NODE_ORDER), so a
# group whose process died is restarted alone (a new step on its nodes) while the others train on
# and it heals from them; a group's own step ends all of that group's tasks when one fails
# (--kill-on-bad-exit=1). The restarts share recovery.in_job's budget (5 within
# 3600s) and never start a new generation (that would fence the groups that went on).
export LAUNCHER_IN_JOB_RESTARTS=0
_launcher_in_job_history=
_launcher_replica_groups() {  # one line per replica group: its hosts in rank order, comma-separated
  local h e b prev= line=
  for h in ${LAUNCHER_NODE_HOSTS//,/ }; do
    e=" ${LAUNCHER_NODE_ORDER:-} "; e="${e#* "$h"=}"; e="${e%% *}"
    case "$e" in *:*:*) b="${e#*:}"; b="${b%:*}" ;; *) b= ;; esac
    if [ -n "$line" ] && { [ -z "$b" ] || [ "$b" != "$prev" ]; }; then echo "$line"; line=; fi
    line="${line:+$line,}$h"; prev=$b
  done
  [ -z "$line" ] || echo "$line"
}
mapfile -t _launcher_group_hosts < <(_launcher_replica_groups)
_launcher_groups=$(_launcher_replica_groups | wc -l)
if [ "$_launcher_groups" -lt 1 ]; then
  # the lighthouse would wait for groups that cannot exist: exit 93, never restarted or requeued
  echo "launcher: recovery.in_job.min_replicas is 1, but this allocation has $_launcher_groups replica group(s) (one per block or leaf switch, else one per node): torchft could never form a quorum; lower min_replicas or ask for more nodes" >&2
  exit 93
fi
_launcher_group_pids=()
_launcher_start_group() {  # $1: the group's id
  local hosts="${_launcher_group_hosts[$1]}" n
  n=$(( $(printf '%s' "$hosts" | tr -cd , | wc -c) + 1 ))
  echo "launcher: replica group $1 of $_launcher_groups on $hosts" >&2
  REPLICA_GROUP_ID=$1 NUM_REPLICA_GROUPS=$_launcher_groups LAUNCHER_REPLICA_GROUP_HOSTS="$hosts" \
  srun --kill-on-bad-exit=1 --nodes="$n" --nodelist="$hosts" \
    --ntasks-per-node=1 --ntasks=$(( n * 1 )) \
    bash -c '_launcher_node_env; export LAUNCHER_LOCAL_RANK="$SLURM_LOCALID" LAUNCHER_RANK="$(( LAUNCHER_NODE_RANK * 1 + SLURM_LOCALID ))"; _launcher_replica_group; trap "" USR1; exec bash -c "$LAUNCHER_RUN"' &
  _launcher_group_pids[$1]=$!
}
_launcher_group_ended() {  # $1: the group, $2: its step's exit status; sets rc when the job must end
  echo "launcher: replica group $1's step exited with $2" >&2
  case "$2" in
    0) return 0 ;;
    75|93) [ "$rc" -ne 0 ] || rc=$2; return 0 ;;
  esac
  if [ "$rc" -eq 0 ] && [ -z "$_launcher_noticed$_launcher_ending" ] && _launcher_next="$(python3 /state/jobs/basic-abc123/launcher_job.pyz in-job-restart --rc "$2" --history "$_launcher_in_job_history" --max-restarts 5 --window 3600 --rejoin-group "$1")"; then
    eval "$_launcher_next"
    echo "launcher: in-job restart $LAUNCHER_IN_JOB_RESTARTS of $LAUNCHER_JOB_ID after exit $2: replica group $1 restarts and rejoins" >&2
    _launcher_start_group "$1"
    return 0
  fi
  # given up (or the job is ending): the job's exit is this group's, and the other groups' steps end
  [ "$rc" -ne 0 ] || rc=$2
  local p
  for p in "${_launcher_group_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
}
for _launcher_g in "${!_launcher_group_hosts[@]}"; do _launcher_start_group "$_launcher_g"; done
rc=0
while [ -n "${_launcher_group_pids[*]}" ]; do   # until every group's step ended
  # Every second, each group whose srun ended is waited for by its pid. Not `wait -n`: bash reaps
  # its children as they end, so which one `wait -n` returned cannot be told before bash 5.1's -p
  # (RHEL 8 has 4.4). A trap (notice, TERM) cuts the second short.
  sleep 1 & wait $! 2>/dev/null
  for _launcher_g in "${!_launcher_group_pids[@]}"; do
    ! kill -0 "${_launcher_group_pids[$_launcher_g]}" 2>/dev/null || continue
    wait "${_launcher_group_pids[$_launcher_g]}"; _launcher_rc=$?
    unset "_launcher_group_pids[$_launcher_g]"
    _launcher_group_ended "$_launcher_g" "$_launcher_rc"
  done
done
echo "launcher: run exited with $rc" >&2
# A run that Slurm already restarted elsewhere (its node was cut off) must not report
# its exit: when the node reconnects, slurmctld takes that report as the end of the job
# and kills the live run. Such a zombie waits here until slurmctld cleans it up.
while :; do
  _launcher_restarts=$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null | grep -o ' Restarts=[0-9]*' | cut -d= -f2)
  if [ -z "$_launcher_restarts" ]; then sleep 5; continue; fi   # controller unreachable: cut off?
  [ "$_launcher_restarts" -gt "${SLURM_RESTART_COUNT:-0}" ] || break
  echo "launcher: this run was superseded by restart $_launcher_restarts; waiting to be cleaned up" >&2
  sleep 30
done
# Exit 75: the run saved on a notice and asks to be restarted. When no notice reached this
# shell (Slurm signalled the step alone, e.g. `scancel --signal=TERM` of the steps, or, seen in
# CI, a job requeued off a cut node whose live step got a TERM when that node reconnected; or
# the time limit's TERM came before the notice), nothing else requeues it: requeue in place if
# it committed progress since the start (_launcher_requeue: never a cancelled job).
if [ "$rc" -eq 75 ] && [ -z "$_launcher_noticed" ]; then
  _launcher_since=$(python3 /state/jobs/basic-abc123/launcher_job.pyz latest --root "$LAUNCHER_CKPT_ROOT" --step 2>/dev/null) || _launcher_since=-1
  if [ "$_launcher_since" -gt "${LAUNCHER_RESUME_STEP:--1}" ]; then
    _launcher_requeue "the run saved on a notice and asked to be restarted (exit 75, step $_launcher_since committed)"
  else
    echo "launcher: the run exited 75 with no new committed checkpoint since the start; not requeueing" >&2
  fi
fi
exit "$rc"
