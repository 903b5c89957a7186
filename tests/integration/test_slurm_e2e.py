"""The slurm backend end to end on the real test cluster (tests/cluster): every job
here is rendered by launcher, submitted with sbatch and run by real slurmd nodes."""

from __future__ import annotations

import re

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, job_id_of

pytestmark = pytest.mark.slurm


def test_two_node_job_sees_one_master_and_ranks_0_and_1(cli, clean_queue):
    spec = cli.spec("twonode", {
        "run": 'echo "RANK=$LAUNCHER_NODE_RANK MASTER=$MASTER_ADDR:$MASTER_PORT NODES=$LAUNCHER_NUM_NODES HOST=$(hostname)"',
        "resources": {"nodes": 2, "time_limit": "5m"}})
    job = cli.launch(spec, "testcl", "--follow")
    lines = sorted(l for l in cli.output(job).splitlines() if l.startswith("RANK="))
    assert [l.split()[0] for l in lines] == ["RANK=0", "RANK=1"]
    masters = {l.split()[1] for l in lines}
    assert len(masters) == 1 and re.match(r"MASTER=node\d:\d+$", masters.pop())
    assert {l.split()[2] for l in lines} == {"NODES=2"}
    assert len({l.split()[3] for l in lines}) == 2  # two distinct hosts
    assert cli.status(job)["state"] == "COMPLETED"


def test_max_switches_1_lands_on_one_leaf_switch(cli, clean_queue):
    spec = cli.spec("oneleaf", {"run": "hostname", "resources": {"nodes": 2, "time_limit": "5m"},
                                "topology": {"max_switches": 1, "switch_wait": "1m"}})
    job = cli.launch(spec, "testcl", "--follow")
    hosts = {l.strip() for l in cli.output(job).splitlines() if l.strip().startswith("node")}
    assert len(hosts) == 2
    assert any(hosts <= set(leaf) for leaf in clean_queue.switches.values()), (hosts, clean_queue.switches)


HOSTILE_VALUES = {
    "SUBST": "$(touch PWNED_ENV)", "BACKTICK": "`touch PWNED_BT`", "QUOTES": "it's \"quoted\"",
    "SEMI": "; touch PWNED_SEMI", "NEWLINE": "first\nsecond", "UNICODE": "naïve — 日本", "DOLLAR": "$HOME ${PATH}",
}


def test_hostile_values_are_printed_literally_and_never_executed(cli, clean_queue, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    run_args = ["$(touch PWNED_RUN)", "`touch PWNED_RUN_BT`", "a'b", 'c"d', "; touch PWNED_RUN_SEMI", "ü"]
    script = "; ".join(f'printf "%s=[%s]\\n" {k} "${k}"' for k in HOSTILE_VALUES)
    spec = cli.spec("hostile", {
        "name": "evil $(touch PWNED_NAME) `id` 'q' ; rm -rf / ü",
        "workdir": str(work),
        "setup": script,
        "run": ["python3", "-c", "import sys, os; print('ARGS=' + repr(sys.argv[1:])); print('NAME=' + repr(os.environ['LAUNCHER_JOB_NAME']))", *run_args],
        "env": HOSTILE_VALUES, "resources": {"time_limit": "5m"}})
    job = cli.launch(spec, "testcl", "--follow")
    out = cli.output(job)
    for k, v in HOSTILE_VALUES.items():
        assert f"{k}=[{v}]" in out, (k, out)
    assert f"ARGS={run_args!r}" in out
    assert "NAME=\"evil $(touch PWNED_NAME) `id` 'q' ; rm -rf / ü\"" in out
    assert not list(work.glob("PWNED*")) and not list(cli.tmp.glob("PWNED*"))


def test_failed_job_keeps_its_exit_code_and_follow_returns_it(cli, clean_queue):
    spec = cli.spec("fails", {"run": "echo about to fail; exit 7", "resources": {"time_limit": "5m"}})
    p = cli.run("launch", spec, "--target", "testcl", "--follow", check=False)
    assert p.returncode == 7 and "about to fail" in p.stdout
    st = cli.status(job_id_of(p))
    # the attempt FAILED; the job stays open (ATTEMPT_FAILED) until `launcher watch` decides
    assert st["state"] == "ATTEMPT_FAILED" and st["attempts"][0]["state"] == "FAILED"
    assert st["attempts"][0]["exit_code"] == 7


def test_cancel_ends_a_running_job_and_is_idempotent(cli, clean_queue):
    spec = cli.spec("sleeper", {"run": "sleep 300", "resources": {"time_limit": "10m"}})
    job = cli.launch(spec)
    cli.wait_state(job, "RUNNING")
    cli.run("cancel", job)
    cli.run("cancel", job)  # again: not an error
    st = cli.wait_state(job, "CANCELLED", timeout=60)
    native = st["attempts"][0]["native_id"]
    clean_queue.wait(native, lambda j: j.get("JobState") in ("CANCELLED",) or not j, timeout=60)


def test_timed_out_job_is_reported_as_timeout(cli, clean_queue):
    spec = cli.spec("slowpoke", {"run": "sleep 600", "resources": {"time_limit": "1m"}})
    job = cli.launch(spec)
    st = cli.wait_state(job, "TIMEOUT", timeout=200, interval=2)
    assert st["reason"] == "TimeLimit"


def test_preempted_job_is_requeued_and_runs_again(cli, clean_queue):
    low = cli.spec("lowprio", {"run": 'echo "run $LAUNCHER_ATTEMPT on $(hostname)"; sleep 20',
                               "resources": {"nodes": 4, "cpus_per_node": 2, "time_limit": "10m"}})
    job = cli.launch(low)
    cli.wait_state(job, "RUNNING")
    high = cli.spec("highprio", {"run": "sleep 1", "resources": {"nodes": 1, "time_limit": "5m"},
                                 "slurm": {"partition": "high"}})
    cli.launch(high)

    def second_attempt_started():
        st = cli.status(job)
        return st if len(st["attempts"]) >= 2 and st["attempts"][1]["state"] in ("RUNNING", "COMPLETED") else None

    st = poll(f"{job}: a second attempt running", second_attempt_started, timeout=150, interval=1)
    assert st["attempts"][0]["state"] == "PREEMPTED", st
    assert st["attempts"][1]["attempt"] == 2
    final = cli.wait_state(job, "COMPLETED", timeout=120)
    out = cli.output(job)
    assert "run 1 on" in out and "run 2 on" in out, out
    assert [e["kind"] for e in final["events"]].count("restarted") == 1


def test_rejected_script_shows_sbatch_stderr_and_records_nothing(cli, clean_queue):
    spec = cli.spec("toobig", {"run": "true", "resources": {"memory_per_node": "64TB"}})
    p = cli.run("launch", spec, "--target", "testcl", check=False)
    assert p.returncode != 0
    assert "sbatch rejected the script" in p.stderr and "node" in p.stderr.lower()
    assert cli.run("status").stdout.strip() == "no jobs"


def test_unreachable_slurm_is_a_clear_error(clean_queue, tmp_path):
    down = tmp_path / "down.conf"  # the real cluster's config, but its controller is not listening there
    down.write_text(re.sub(r"(?m)^SlurmctldPort=\d+", "SlurmctldPort=9", clean_queue.conf.read_text()))
    cli = LauncherCLI(tmp_path, None, {"gone": {"backend": "slurm", "slurm_conf": str(tmp_path / "missing.conf")},
                                       "down": {"backend": "slurm", "slurm_conf": str(down)}})
    spec = cli.spec("x", {"run": "true"})
    p = cli.run("launch", spec, "--target", "gone", check=False)
    assert p.returncode != 0 and "target gone" in p.stderr and "missing.conf does not exist" in p.stderr
    p = cli.run("launch", spec, "--target", "down", check=False)
    assert p.returncode != 0 and "target down: cannot reach Slurm" in p.stderr
    assert "Unable to contact slurm controller" in p.stderr
    assert cli.run("status").stdout.strip() == "no jobs"


def test_targets_lists_probed_facts(cli, clean_queue):
    out = cli.run("targets").stdout
    assert "testcl  [slurm]" in out and "slurm_version: 22.05" in out or "slurm_version: 2" in out
    assert "topology_plugin: topology/tree" in out


def test_plan_measures_the_queue_wait_behind_a_full_partition(cli, clean_queue):
    import json as _json

    spec = cli.spec("waiter", {"run": "true", "targets": ["testcl"], "resources": {"nodes": 1, "time_limit": "30m"}})
    idle = _json.loads(cli.run("plan", spec, "--json").stdout)
    blocker = clean_queue.sbatch("-N4", "--exclusive", "-t", "20", "-o", "/dev/null", script="#!/bin/bash\nsleep 600\n")
    clean_queue.wait(blocker, "RUNNING")
    busy = _json.loads(cli.run("plan", spec, "--json").stdout)
    clean_queue.run("scancel", blocker)

    def wait_hours(plan):
        (row,) = [r for r in plan["rows"] if r["target"] == "testcl"]
        return row["queue_hours"]

    assert wait_hours(idle) == 0
    assert 0.2 < wait_hours(busy) <= 20 / 60 + 0.01  # the blocker's remaining time limit
