"""recovery.in_job kind torchft on Slurm: a step per replica group, and a group restarted alone
(``in-job-restart --rejoin-group``) in the generation the other groups go on writing under. The
rendered shell functions run in bash; the job-side command on a real checkpoint root; how status
(events) and report (counts) read a group's restart."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from launcher.backend.sections import spec_from_text
from launcher.checkpoint import open_store, read_generations
from launcher.recovery.injob import event_detail, restarts_by_attempt
from launcher.report import AttemptIn, History, Save, account
from tests.unit.test_in_job import _exports, _run

BASE = "name: t\nrun: python3 train.py\ncheckpoint: {root: /ck}\nresources: {nodes: 4}\n"
TORCHFT = "recovery: {in_job: {kind: torchft, max_restarts: 2, window: 1h, min_replicas: 1}}\n"


def _render(spec: str = TORCHFT) -> str:
    from tests.unit.test_in_job import _render as render

    return render("slurm", BASE + spec)


def _function(text: str, name: str) -> str:
    start = text.index(f"{name}() {{")
    return text[start:text.index("\n}\n", start) + 3]


def _bash(code: str, env: dict) -> str:
    return subprocess.run(["bash", "-uc", code], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True,
                          text=True, check=True).stdout


def test_the_nodes_split_into_replica_groups_in_rank_order_by_block_and_else_one_per_node():
    fn = _function(_render(), "_launcher_replica_groups")
    # ranks 0..3 are node3, node1 (blockA) and node4, node2 (blockB): hostname order would cross blocks
    order = "node1=1:blockA:2 node2=3:blockB:2 node3=0:blockA:2 node4=2:blockB:2"
    assert _bash(fn + "_launcher_replica_groups", {"LAUNCHER_NODE_HOSTS": "node3,node1,node4,node2",
                                                   "LAUNCHER_NODE_ORDER": order}).split() == [
        "node3,node1", "node4,node2"]
    assert _bash(fn + "_launcher_replica_groups", {"LAUNCHER_NODE_HOSTS": "a,b,c",
                                                   "LAUNCHER_NODE_ORDER": ""}).split() == ["a", "b", "c"]
    assert _bash(fn + "_launcher_replica_groups", {"LAUNCHER_NODE_HOSTS": "a"}).split() == ["a"]


@pytest.mark.parametrize("node,local,want", [
    ("node4", "0", {"MASTER_ADDR": "node2", "MASTER_PORT": "20002", "PET_NODE_RANK": "1", "PET_NNODES": "2",
                    "LAUNCHER_GROUP_RANK": "2", "LAUNCHER_GROUP_WORLD_SIZE": "4"}),
    ("node2", "1", {"MASTER_ADDR": "node2", "MASTER_PORT": "20002", "PET_NODE_RANK": "0", "PET_NNODES": "2",
                    "LAUNCHER_GROUP_RANK": "1", "LAUNCHER_GROUP_WORLD_SIZE": "4"}),
])
def test_each_task_gets_its_replica_groups_own_torch_distributed_world(node, local, want):
    """A replica group is a torch.distributed world of its own: its first node, a port of its own,
    and ranks counted within it (2 tasks per node here); the group's id comes from its step."""
    fn = _function(_render(), "_launcher_replica_group")
    env = {"SLURMD_NODENAME": node, "MASTER_ADDR": "node9", "MASTER_PORT": "20000", "LAUNCHER_TASKS_PER_NODE": "2",
           "LAUNCHER_LOCAL_RANK": local, "LAUNCHER_NODE_RANK": "3", "LAUNCHER_NUM_NODES": "4",
           "REPLICA_GROUP_ID": "1", "NUM_REPLICA_GROUPS": "2", "LAUNCHER_REPLICA_GROUP_HOSTS": "node2,node4"}
    names = ["REPLICA_GROUP_ID", "NUM_REPLICA_GROUPS", *want]
    out = _bash(fn + "_launcher_replica_group; " + "; ".join(f'echo "{n}=${n}"' for n in names), env)
    assert dict(line.split("=", 1) for line in out.split()) == {"REPLICA_GROUP_ID": "1", "NUM_REPLICA_GROUPS": "2",
                                                                  **want}


def test_without_a_groups_step_the_job_wide_world_is_left_alone():
    """On local (one node, one group, no step per group) MASTER_ADDR and MASTER_PORT stay the job's."""
    fn = _function(_render(), "_launcher_replica_group")
    out = _bash(fn + '_launcher_replica_group; echo "$REPLICA_GROUP_ID $MASTER_ADDR $MASTER_PORT"',
                {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "20000", "LAUNCHER_NODE_RANK": "0",
                 "LAUNCHER_NUM_NODES": "1", "LAUNCHER_NODE_BLOCK": ""})
    assert out.split() == ["0", "127.0.0.1", "20000"]


def test_the_script_runs_and_restarts_each_group_as_a_step_of_its_own():
    text = _render()
    assert 'srun --kill-on-bad-exit=1 --nodes="$n" --nodelist="$hosts"' in text
    assert '--rejoin-group "$1"' in text
    # which child `wait -n` reaped is unknown before bash 5.1 (RHEL 8 has 4.4): each group's pid is waited for
    assert "\n  wait -n" not in text and "; wait -n" not in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


# ---- the job-side command on a real root (test_in_job's runner: argv, env, monkeypatch)
def test_a_group_restart_is_recorded_in_its_generation_and_starts_none(tmp_path, monkeypatch):
    root = tmp_path / "ck"
    rc, out, _ = _run(["resume-env", "--attempt-hint", "1"],
                      {"LAUNCHER_CKPT_ROOT": str(root), "LAUNCHER_JOB_ID": "j1", "LAUNCHER_NODE_FACTS": "0"}, monkeypatch)
    assert rc == 0 and _exports(out)["LAUNCHER_GENERATION"] == "1"
    monkeypatch.setenv("LAUNCHER_GENERATION", "1")
    argv = ["in-job-restart", "--rc", "137", "--max-restarts", "2", "--window", "3600", "--rejoin-group", "1"]
    rc, out, err = _run(argv, {}, monkeypatch)
    assert rc == 0, err
    ex = _exports(out)
    # no new generation (it would fence the groups that trained on), no resume: the group heals from them
    assert set(ex) == {"LAUNCHER_IN_JOB_RESTARTS", "_launcher_in_job_history"} and ex["LAUNCHER_IN_JOB_RESTARTS"] == "1"
    gens = read_generations(open_store(str(root)))
    assert gens.generation == 1
    (r,) = gens.record(1)["rejoins"]
    assert (r["group"], r["restart"], r["exit"], r["committed_step"]) == (1, 1, 137, -1) and r["failed_at"]
    assert "replica group 1 restarts in generation 1" in err
    # group 0 next: the shared budget (2 within the window) allows it, then gives up
    rc, out, _ = _run(argv[:-1] + ["0", "--history", ex["_launcher_in_job_history"]], {}, monkeypatch)
    assert rc == 0 and _exports(out)["LAUNCHER_IN_JOB_RESTARTS"] == "2"
    rc, out, err = _run(argv + ["--history", _exports(out)["_launcher_in_job_history"]], {}, monkeypatch)
    assert rc == 1 and out == "" and "gives up" in err
    assert [x["group"] for x in read_generations(open_store(str(root))).record(1)["rejoins"]] == [1, 0]


def test_a_restarted_group_resumes_from_the_newest_commit_of_its_generation(tmp_path, monkeypatch):
    """Found by bench/in_job_schedule.py: a hang's processes were all killed, both groups restarted
    with no live peer to heal from, and from the attempt's start (a fresh start here): their saves
    then ran into the generation's committed steps (write-once) until the budget gave up. A rejoining
    group now gets the newest commit as its resume point (a live peer ahead of it still heals it)."""
    from launcher import jobside

    root = tmp_path / "ck"
    rc, out, _ = _run(["resume-env", "--attempt-hint", "1"],
                      {"LAUNCHER_CKPT_ROOT": str(root), "LAUNCHER_JOB_ID": "j1", "LAUNCHER_NODE_FACTS": "0"}, monkeypatch)
    assert rc == 0 and _exports(out)["LAUNCHER_RESUME_STEP"] == "-1"
    monkeypatch.setenv("LAUNCHER_GENERATION", "1")
    monkeypatch.setenv("LAUNCHER_HEARTBEAT_SECONDS", "0")
    for step in (4, 8):
        with jobside.save(step) as d:
            (Path(d) / "state").write_text(str(step))
    argv = ["in-job-restart", "--rc", "137", "--max-restarts", "3", "--window", "3600", "--rejoin-group", "0"]
    rc, out, err = _run(argv, {}, monkeypatch)
    assert rc == 0, err
    ex = _exports(out)
    assert ex["LAUNCHER_RESUME_STEP"] == "8" and Path(ex["LAUNCHER_RESUME_FROM"]).name == "step-000000008.g1", ex
    assert (Path(ex["LAUNCHER_RESUME_FROM"]) / "state").read_text() == "8"
    assert "LAUNCHER_GENERATION" not in ex  # still no new generation
    assert read_generations(open_store(str(root))).generation == 1
    # the other group goes on saving while the restarted one starts: gc (checkpoint.keep) keeps its
    # resume point past the kept ones until the group restarts again (seen in the slurm tier: step 12
    # was gone before the restarted group loaded it)
    monkeypatch.setenv("LAUNCHER_CKPT_KEEP", "1")
    for step in (12, 16):
        with jobside.save(step) as d:
            (Path(d) / "state").write_text(str(step))
    assert sorted(p.name for p in root.glob("step-*")) == ["step-000000008.g1", "step-000000016.g1"]
    rc, out, err = _run(argv + ["--history", ex["_launcher_in_job_history"]], {}, monkeypatch)
    assert rc == 0 and _exports(out)["LAUNCHER_RESUME_STEP"] == "16", err
    with jobside.save(20) as d:
        (Path(d) / "state").write_text("20")
    # group 0's newest resume point (16) pinned; 8 released with its earlier restart
    assert sorted(p.name for p in root.glob("step-*")) == ["step-000000016.g1", "step-000000020.g1"]


def test_a_group_restart_needs_the_generation_it_belongs_to(tmp_path, monkeypatch):
    _run(["resume-env"], {"LAUNCHER_CKPT_ROOT": str(tmp_path / "ck"), "LAUNCHER_JOB_ID": "j1",
                          "LAUNCHER_NODE_FACTS": "0"}, monkeypatch)
    monkeypatch.delenv("LAUNCHER_GENERATION", raising=False)
    monkeypatch.delenv("LAUNCHER_ATTEMPT", raising=False)
    rc, out, err = _run(["in-job-restart", "--rc", "1", "--max-restarts", "2", "--window", "60", "--rejoin-group", "0"],
                        {}, monkeypatch)
    assert rc == 1 and out == "" and "LAUNCHER_GENERATION" in err
    assert "rejoins" not in read_generations(open_store(str(tmp_path / "ck"))).record(1)


# ---- how status and report read them
def test_a_groups_restart_is_an_in_job_restart_event_of_its_attempt_with_its_group():
    hist = [{"generation": 1, "job_id": "j", "attempt": 1, "resume_step": -1,
             "rejoins": [{"group": 1, "restart": 1, "exit": 137, "failed_at": "2026-12-07T10:00:05Z"}]},
            {"generation": 2, "job_id": "j", "attempt": 1, "resume_step": 8,
             "in_job": {"restart": 2, "exit": 1, "previous_generation": 1, "failed_at": "2026-12-07T10:01:00Z"},
             "rejoins": [{"group": 0, "restart": 3, "exit": 1, "failed_at": "2026-12-07T10:02:00Z"}]}]
    got = restarts_by_attempt("j", [1], hist)[1]
    assert [(h["generation"], h["in_job"]["restart"]) for h in got] == [(1, 1), (2, 2), (2, 3)]
    assert event_detail(1, got[0]) == {"attempt": 1, "restart": 1, "exit": 137, "failed_at": "2026-12-07T10:00:05Z",
                                       "generation": 1, "resume_step": None, "resume_tier": None, "group": 1}
    assert "group" not in event_detail(1, got[1])


def test_a_groups_restart_counts_as_an_in_job_restart_and_takes_no_wall_time_of_its_own():
    a = AttemptIn(1, "COMPLETED", queued=1000, started=1005, ended=1050, program_start=1010,
                  saves=[Save(1044, 1045, 20, True)], resume_step=-1, group_restarts=2)
    acc = account(History("j", t0=1000, now=5000, attempts=[a]))
    assert acc.attempts[0].in_job_restarts == 2
    assert acc.totals["in_job_restart"] == 0 and acc.totals["lost_work"] == 0
    assert sum(acc.totals.values()) == pytest.approx(acc.wall_s)


# ---- the script's supervision of the groups' steps, run in bash with srun and the helper stubbed
STUBS = r'''
_launcher_node_env() { export LAUNCHER_NODE_RANK=0; }
export -f _launcher_node_env
srun() {  # the group's tasks, one per --nodelist host, as a step: TERM is passed on to them, and the
  # first task that fails ends the others (--kill-on-bad-exit=1); its status is the step's
  local hosts="" a pids=() rc=0 r i
  for a in "$@"; do case "$a" in --nodelist=*) hosts="${a#--nodelist=}" ;; esac; done
  trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM
  for h in ${hosts//,/ }; do SLURMD_NODENAME=$h SLURM_LOCALID=0 bash -c "${@: -1}" >/dev/null 2>&1 & pids+=($!); done
  while [ -n "${pids[*]}" ]; do
    sleep 0.05
    for i in "${!pids[@]}"; do
      ! kill -0 "${pids[$i]}" 2>/dev/null || continue
      wait "${pids[$i]}"; r=$?; unset "pids[$i]"
      [ "$r" -eq 0 ] || [ "$rc" -ne 0 ] || { rc=$r; kill -TERM "${pids[@]}" 2>/dev/null; }
    done
  done
  return $rc
}
python3() {  # the job-side helper: in-job-restart allows MAX restarts, then gives up
  local n=$(( ${LAUNCHER_IN_JOB_RESTARTS:-0} + 1 ))
  [ "$n" -le "$STUB_MAX" ] || return 1
  echo "$*" >> "$OUT/helper"
  echo "export LAUNCHER_IN_JOB_RESTARTS=$n _launcher_in_job_history=x"
}
'''
# each task: logs its start, then exits as the file FAIL-<group>-<host> says (once per line), else 0
# after a sleep that a TERM ends with it
RUN = r'''echo "start $REPLICA_GROUP_ID $SLURMD_NODENAME $MASTER_ADDR $MASTER_PORT" >> "$OUT/log"
f="$OUT/FAIL-$REPLICA_GROUP_ID-$SLURMD_NODENAME"
if [ -s "$f" ]; then rc=$(head -1 "$f"); sed -i 1d "$f"; exit "$rc"; fi
s=; trap '[ -z "$s" ] || kill "$s"; exit 143' TERM
sleep "${STUB_SLEEP:-0.3}" & s=$!; wait $s || exit 143; echo "done $REPLICA_GROUP_ID $SLURMD_NODENAME" >> "$OUT/log"'''


def _supervise(tmp_path, fails: dict, max_restarts: int, sleep: float = 0.3, spec: str = TORCHFT):
    text = _render(spec)
    body = (_function(text, "_launcher_replica_group") + "export -f _launcher_replica_group\n"
            + text[text.index("_launcher_replica_groups() {"):text.index('echo "launcher: run exited with $rc" >&2')])
    for (group, host), codes in fails.items():
        (tmp_path / f"FAIL-{group}-{host}").write_text("".join(f"{c}\n" for c in codes))
    script = (STUBS + "_launcher_noticed= _launcher_ending=\nexport LAUNCHER_IN_JOB_RESTARTS=0\n" + body
              + 'echo "rc=$rc"\n')
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "STUB_MAX": str(max_restarts), "STUB_SLEEP": str(sleep),
           "LAUNCHER_NODE_HOSTS": "n1,n2,n3,n4", "LAUNCHER_NODE_ORDER": "n1=0:b1:2 n2=1:b1:2 n3=2:b2:2 n4=3:b2:2",
           "MASTER_PORT": "20000", "MASTER_ADDR": "n1", "LAUNCHER_TASKS_PER_NODE": "1", "LAUNCHER_NUM_NODES": "4",
           "LAUNCHER_RUN": RUN, "LAUNCHER_JOB_ID": "t-1"}
    p = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    log = (tmp_path / "log").read_text().splitlines() if (tmp_path / "log").exists() else []
    return p, log


def test_a_failed_group_is_restarted_alone_and_the_job_ends_when_every_group_is_done(tmp_path):
    p, log = _supervise(tmp_path, {(1, "n4"): [137]}, max_restarts=2)
    assert p.stdout.strip().endswith("rc=0"), p.stdout + p.stderr
    starts = [line.split()[1:] for line in log if line.startswith("start")]
    # group 0 (n1, n2) started once; group 1 (n3, n4) twice, each time its own world: n3, port 20002
    assert sorted(s[:2] for s in starts) == [["0", "n1"], ["0", "n2"], ["1", "n3"], ["1", "n3"], ["1", "n4"],
                                             ["1", "n4"]]
    assert {tuple(s[2:]) for s in starts if s[0] == "1"} == {("n3", "20002")}
    assert {tuple(s[2:]) for s in starts if s[0] == "0"} == {("n1", "20001")}
    assert sorted(line for line in log if line.startswith("done")) == [
        "done 0 n1", "done 0 n2", "done 1 n3", "done 1 n4"]
    assert "--rejoin-group 1" in (tmp_path / "helper").read_text()
    assert "replica group 1 restarts and rejoins" in p.stderr


def test_when_the_budget_is_spent_the_other_groups_end_and_the_job_exits_with_the_failed_groups_status(tmp_path):
    # group 1 fails three times; 2 restarts allowed; group 0 would run 30 s: it is ended instead
    p, log = _supervise(tmp_path, {(1, "n3"): [1, 1, 7]}, max_restarts=2, sleep=30)
    assert p.stdout.strip().endswith("rc=7"), p.stdout + p.stderr
    assert [line.split()[1] for line in log if line.startswith("start")].count("1") == 6  # 3 runs of 2 nodes
    assert not [line for line in log if line.startswith("done 0")]  # group 0 was ended, not waited for 30 s
    assert (tmp_path / "helper").read_text().count("--rejoin-group 1") == 2


def test_exit_75_and_93_are_never_restarted_in_the_job(tmp_path):
    for code in (75, 93):
        out = tmp_path / str(code)
        out.mkdir()
        p, log = _supervise(out, {(0, "n2"): [code]}, max_restarts=5)
        assert p.stdout.strip().endswith(f"rc={code}"), p.stdout + p.stderr
        assert not (out / "helper").exists()
        assert [line.split()[1] for line in log if line.startswith("start")].count("0") == 2


# ---- NVRx's in-process restarts, told by the program (jobside.restarted_in_process)
def test_an_in_process_restart_is_recorded_once_in_its_generation_and_read_as_an_in_job_restart(tmp_path, monkeypatch):
    from launcher import jobside
    from launcher.recovery.injob import summary

    root = tmp_path / "ck"
    rc, out, _ = _run(["resume-env", "--attempt-hint", "1"],
                      {"LAUNCHER_CKPT_ROOT": str(root), "LAUNCHER_JOB_ID": "j", "LAUNCHER_NODE_FACTS": "0"}, monkeypatch)
    monkeypatch.setenv("LAUNCHER_GENERATION", "1")
    assert jobside.restarted_in_process(1, "RuntimeError('injected')") is True
    assert jobside.restarted_in_process(1, "asked twice") is True  # once per restart
    assert jobside.restarted_in_process(2) is True
    with pytest.raises(ValueError, match="int >= 1"):
        jobside.restarted_in_process(0)
    rec = read_generations(open_store(str(root))).record(1)
    assert [(r["kind"], r["restart"], r["exit"]) for r in rec["rejoins"]] == [("in_process", 1, None),
                                                                            ("in_process", 2, None)]
    assert read_generations(open_store(str(root))).generation == 1  # no new generation
    got = restarts_by_attempt("j", [1], [dict(rec, attempt=1)])[1]
    d = event_detail(1, got[0])
    assert (d["how"], d["restart"], d["reason"], d["exit"]) == ("in_process", 1, "RuntimeError('injected')", None)
    assert "kind" not in d  # the event's own field: an event of kind in_job_restart
    assert summary({"in_job": {"restarts": 2, "how": "in_process"}}) == (
        "2 in-job restart(s), the last inside the run's processes (NVRx)")
    assert summary({"in_job": {"restarts": 1, "group": 1, "last_exit": 137}}) == (
        "1 in-job restart(s), the last of replica group 1 alone after exit 137, healed from the groups that went on")


def test_more_min_replicas_than_the_allocation_has_groups_ends_the_job_at_once_with_93(tmp_path):
    """4 nodes in 2 blocks are 2 groups: a lighthouse waiting for 3 would never form a quorum."""
    p, log = _supervise(tmp_path, {}, max_restarts=2, spec=TORCHFT.replace("min_replicas: 1", "min_replicas: 3"))
    assert p.returncode == 93 and log == [], p.stdout + p.stderr
    assert "min_replicas is 3, but this allocation has 2 replica group(s)" in p.stderr
