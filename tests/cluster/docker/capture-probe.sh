#!/usr/bin/env bash
# capture-probe.sh NAME SUFFIX OUTDIR - capture the real outputs the slurm backend parses
# (probe facts, scontrol -o show job in several job states, sacct -c) from a running
# dockerized cluster (scripts/slurm-cluster up), as alice on its login node. Used to make
# tests/unit/data/*_2411.txt:
#   scripts/slurm-cluster up --slurm 24.11
#   tests/cluster/docker/capture-probe.sh launcher-slurm-2411 2411 tests/unit/data
# Takes ~3 min (one job runs into its 1-minute time limit).
set -euo pipefail
name=${1:?project name}; sfx=${2:?suffix}; out=${3:?out dir}
login="${name}_login_1"
as_alice() { docker exec -i -u alice -w /home/alice "$login" "$@"; }
sub() { as_alice sbatch --parsable -o /dev/null "$@" | cut -d';' -f1; }
state_of() { as_alice scontrol -o show job "$1" | grep -o ' JobState=[A-Z_]*' | cut -d= -f2; }
wait_state() { # job state...
  local j=$1; shift
  for _ in $(seq 600); do
    local s; s=$(state_of "$j")
    for w in "$@"; do [[ $s == "$w" ]] && return 0; done
    sleep 0.5
  done
  echo "job $j never reached $* (is $(state_of "$j"))" >&2; return 1
}
show() { as_alice scontrol -o show job "$1"; }

as_alice sinfo --version
as_alice scontrol show config >"$out/show_config_$sfx.txt"
as_alice sinfo -h -o '%P|%a|%l|%D|%G' >"$out/sinfo_partitions_$sfx.txt"
ok=$(sub -N2 --wrap 'srun hostname')
fail=$(sub -N1 --wrap 'exit 3')
rq=$(sub -N1 --requeue --wrap 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then sleep 3; exit 5; fi; sleep 300')
tmo=$(sub -N1 --time=1 --wrap 'sleep 300')
wait_state "$ok" COMPLETED
wait_state "$fail" FAILED
wait_state "$rq" RUNNING
show "$rq" >"$out/scontrol_${sfx}_running.txt"
as_alice sinfo -h -N -o '%N|%R|%T|%G|%c|%m' >"$out/sinfo_nodes_$sfx.txt"
show "$ok" >"$out/scontrol_${sfx}_completed.txt"
show "$fail" >"$out/scontrol_${sfx}_failed.txt"
# requeued, then failed: requeue it; its second run exits 5
as_alice scontrol requeue "$rq"
wait_state "$rq" FAILED
show "$rq" >"$out/scontrol_${sfx}_requeued_failed.txt"
wait_state "$tmo" TIMEOUT
show "$tmo" >"$out/scontrol_${sfx}_timeout.txt"
# preempted: a 4-node batch job (requeues on preemption) pushed out by a job on `high`
low=$(sub -N4 -c2 -p batch --requeue --wrap 'sleep 300')
wait_state "$low" RUNNING
high=$(sub -N1 -p high --wrap 'sleep 2')
for _ in $(seq 120); do
  [[ $(show "$low") == *Restarts=[1-9]* ]] && break; sleep 0.5
done
show "$low" >"$out/scontrol_${sfx}_preempted_requeued.txt"
wait_state "$high" COMPLETED
docker exec "${name}_slurmctld_1" scancel "$low"
wait_state "$low" CANCELLED
sleep 1
# sacct -c as root on the controller: reading the jobcomp/filetxt file fails for other users
# ("sacct: fatal: open ...: Permission denied", 22.05 and 24.11 alike, even when it is 0644)
docker exec "${name}_slurmctld_1" sacct -c -n -P -j "$ok,$fail,$rq,$tmo,$low,$high" -o JobIDRaw,State,ExitCode,NodeList,Start,End,Reason,Comment \
  >"$out/sacct_c_$sfx.txt"
echo "captured into $out: jobs ok=$ok fail=$fail requeued=$rq timeout=$tmo preempted=$low high=$high"
