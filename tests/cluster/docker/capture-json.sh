#!/usr/bin/env bash
# capture-json.sh NAME OUTDIR - capture `scontrol -o show job` and `scontrol --json show job`
# side by side (the same moment, as alice on the login node) from a running dockerized
# Slurm >= 23.02 cluster, with jobs in every state the launcher reads: running, pending
# (held; an array's pending tasks), completed, failed (exit 3), requeued then failed,
# timed out, cancelled, node failure (a --no-requeue job whose node is `docker kill`ed),
# preempted (requeued and waiting; --no-requeue), array elements. Used to make
# tests/unit/data/json_2411/:
#   scripts/slurm-cluster up --slurm 24.11
#   tests/cluster/docker/capture-json.sh launcher-slurm-2411 tests/unit/data/json_2411
# Takes ~2-3 min (one job runs into its 1-minute time limit). Leaves node4 resumed.
set -euo pipefail
name=${1:?project name}; out=${2:?out dir}
mkdir -p "$out"
login="${name}_login_1" ctld="${name}_slurmctld_1"
as_alice() { docker exec -i -u alice -w /home/alice "$login" "$@"; }
sub() { as_alice sbatch --parsable -o /dev/null "$@" | cut -d';' -f1; }
field() { as_alice scontrol -o show job "$1" | grep -o " $2=[^ ]*" | head -n1 | cut -d= -f2; }
wait_for() { # job field value...
  local j=$1 f=$2; shift 2
  for _ in $(seq 600); do
    local s; s=$(field "$j" "$f")
    for w in "$@"; do [[ $s == "$w" ]] && return 0; done
    sleep 0.5
  done
  echo "job $j: $f never became $* (is $(field "$j" "$f"))" >&2; return 1
}
snapshot() { # NAME: both formats, back to back
  as_alice scontrol -o show job >"$out/$1.txt"
  as_alice scontrol --json show job >"$out/$1.json"
}

as_alice scontrol --json show job 67108863 >"$out/probe.json"   # what the probe reads
tmo=$(sub -N1 --time=1 --wrap 'sleep 300')
ok=$(sub -N2 --wrap 'srun hostname')
fail=$(sub -N1 --wrap 'exit 3')
arr=$(sub -N1 --array=0-1 --wrap 'exit $SLURM_ARRAY_TASK_ID')
rq=$(sub -N1 --requeue --wrap 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then sleep 2; exit 5; fi; sleep 300')
wait_for "$ok" JobState COMPLETED
wait_for "$fail" JobState FAILED
wait_for "$rq" JobState RUNNING
as_alice scontrol requeue "$rq"
# cancelled while running
can=$(sub -N1 --wrap 'sleep 300')
wait_for "$can" JobState RUNNING
as_alice scancel "$can"
# node failure: a --no-requeue job on node4, whose container dies
nf=$(sub -N1 --no-requeue -w node4 --wrap 'sleep 300')
wait_for "$nf" JobState RUNNING
docker kill "${name}_node4_1" >/dev/null
wait_for "$nf" JobState NODE_FAIL
docker start "${name}_node4_1" >/dev/null
# preemption on node1 and node2: one job requeues, one (--no-requeue) cannot
low=$(sub -N1 --exclusive -w node1 -p batch --requeue --wrap 'sleep 300')
lownr=$(sub -N1 --exclusive -w node2 -p batch --no-requeue --wrap 'sleep 300')
wait_for "$low" JobState RUNNING
wait_for "$lownr" JobState RUNNING
held=$(sub -N1 --hold --wrap 'true')
throttled=$(sub -N1 --array=0-3%1 -w node3 --wrap 'sleep 60')
sub -N1 -p high --exclusive -w node1 --time=2 --wrap 'sleep 20' >/dev/null
sub -N1 -p high --exclusive -w node2 --time=2 --wrap 'sleep 20' >/dev/null
wait_for "$low" Restarts 1
wait_for "${throttled}_0" JobState RUNNING
snapshot live
wait_for "$tmo" JobState TIMEOUT
wait_for "$rq" JobState FAILED
snapshot done
as_alice scancel "$low" "$held" "$throttled"
for _ in $(seq 60); do
  docker exec "$ctld" scontrol update NodeName=node4 State=RESUME 2>/dev/null || true
  [[ $(docker exec "$ctld" sinfo -h -n node4 -o %T) == idle ]] && break; sleep 1
done
echo "captured into $out: ok=$ok fail=$fail array=$arr requeued=$rq timeout=$tmo cancelled=$can" \
     "node_fail=$nf preempted=$low preempted_no_requeue=$lownr held=$held throttled=$throttled"
