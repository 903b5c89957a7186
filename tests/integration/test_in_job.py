"""recovery.in_job (kind: allocation) on real targets: a run killed from outside (SIGKILL) is
rerun in the same allocation from its last commit (a new process tree on local, a new srun step
on the test cluster), with `launcher watch` running beside it: 0 resubmissions by the launcher and
0 Slurm requeues, and each rerun shows in status, the events and the report. A stand-in program
that exits 93 is never restarted (not in the job, not by requeue, not by resubmission)."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import committed_steps, start_watcher, stop_watchers

PROGRAM = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
    from launcher import jobside
    piddir, steps = sys.argv[1], int(sys.argv[2])
    # "G:S,...": generation G stops at step S (committed, recorded) and waits there to be killed, so
    # a kill always lands on a live run however late a loaded machine lets the test see the step
    held = sys.argv[3] if len(sys.argv) > 3 else ""
    holds = dict(tuple(int(x) for x in h.split(":")) for h in held.split(",") if h)
    gen = int(os.environ["LAUNCHER_GENERATION"])
    with open(os.path.join(piddir, "pid-%d" % gen), "w") as f:
        f.write(str(os.getpid()))
    start = jobside.resume_step() + 1
    print("started gen %d at step %d (in-job restarts %s)" % (gen, start, os.environ.get("LAUNCHER_IN_JOB_RESTARTS")),
          flush=True)
    for step in range(start, steps + 1):
        time.sleep(0.2)
        if step % 2 == 0:
            with jobside.save(step) as d:
                open(os.path.join(d, "s"), "w").write(str(step))
        print("step %d" % step, flush=True)
        with open(os.path.join(piddir, "step-%d" % gen), "w") as f:
            f.write(str(step))
        while holds.get(gen) == step:
            time.sleep(1)
    print("DONE gen %d" % gen, flush=True)
""")


KILLS = ((1, 4), (2, 8))  # (generation, step) of each kill_run of the killed-run tests


def in_job_spec(cli, base: Path, name: str, steps: int, holds=(), **extra):
    """HOLDS: (generation, step) pairs at which the program waits to be killed (``kill_run``)."""
    prog = base / "prog.py"
    prog.write_text(PROGRAM)
    piddir = base / f"pids-{name}"
    piddir.mkdir()
    hold = ",".join(f"{g}:{s}" for g, s in holds)
    body = {"run": [sys.executable, "-I", "-S", str(prog), str(piddir), str(steps), *([hold] if hold else [])],
            "checkpoint": {"root": str(base / f"ckpt-{name}")},
            "recovery": {"in_job": {"kind": "allocation", "max_restarts": 3, "window": "1h"}, "app_error": 2},
            **extra}
    return cli.spec(name, body), piddir, base / f"ckpt-{name}"


def kill_run(cli, piddir: Path, root: Path, gen: int, after_step: int) -> None:
    """SIGKILL generation GEN's program once it committed AFTER_STEP (an even step: it commits
    every second step, before it records the step done)."""
    done = piddir / f"step-{gen}"

    def reached():
        try:
            return int(done.read_text() or -1) >= after_step
        except (OSError, ValueError):
            return False

    poll(f"generation {gen} past step {after_step}", reached, timeout=120, interval=0.05)
    # killed first: a `launcher checkpoints` call takes seconds on a machine busy with the other
    # tiers, and the run must still be running when the kill lands (the commit stays either way)
    os.kill(int((piddir / f"pid-{gen}").read_text()), signal.SIGKILL)
    assert max(committed_steps(cli, root), default=-1) >= after_step


def check_in_job_run(cli, job: str, kills: int) -> dict:
    st = cli.wait_state(job, "COMPLETED", timeout=240, interval=0.5)
    # one attempt: the launcher neither resubmitted nor took a requeue for the killed runs
    assert [a["state"] for a in st["attempts"]] == ["COMPLETED"], st["attempts"]
    events = [e for e in st["events"] if e["kind"] == "in_job_restart"]
    assert [e["restart"] for e in events] == list(range(1, kills + 1)), st["events"]
    assert all(e["exit"] == 128 + signal.SIGKILL for e in events), events
    assert all(e["resume_step"] is not None and e["resume_step"] >= 2 for e in events), events
    assert not [e for e in st["events"] if e["kind"] in ("resubmitted", "retry_scheduled", "gave_up")], st["events"]
    assert st["attempts"][0]["in_job"]["restarts"] == kills
    text = cli.run("status", job).stdout
    assert f"{kills} in-job restart(s)" in text, text
    rep = json.loads(cli.run("report", job, "--json").stdout)
    assert rep["categories"]["in_job_restart"] > 0, rep["categories"]
    assert rep["attempts"][0]["in_job_restarts"] == kills
    assert abs(sum(rep["categories"].values()) - rep["wall_s"]) < 1.0
    log = cli.output(job)
    assert log.count("DONE gen") == 1 and f"in-job restart {kills} of {job}" in log, log
    return st


def test_a_killed_run_is_rerun_in_place_with_no_resubmission_local(cli):
    spec, piddir, root = in_job_spec(cli, cli.tmp, "injob-local", 40, holds=KILLS)
    job = cli.launch(spec, "local")
    watcher = start_watcher(cli, 0, interval=0.2)
    try:
        for gen, step in KILLS:
            kill_run(cli, piddir, root, gen, step)
        check_in_job_run(cli, job, 2)
    finally:
        stop_watchers([watcher])


def test_the_budget_within_the_window_hands_over_to_the_launchers_recovery_local(cli):
    """max_restarts: 1: the second kill is not rerun in the job; the attempt fails and the
    launcher's own recovery (app_error) resubmits, from the last commit."""
    spec, piddir, root = in_job_spec(cli, cli.tmp, "injob-budget", 40, holds=KILLS,
                                     recovery={"in_job": {"max_restarts": 1, "window": "1h"}, "app_error": 2})
    job = cli.launch(spec, "local")
    watcher = start_watcher(cli, 0, interval=0.2)
    try:
        for gen, step in KILLS:
            kill_run(cli, piddir, root, gen, step)
        st = cli.wait_state(job, "COMPLETED", timeout=240, interval=0.5)
    finally:
        stop_watchers([watcher])
    assert [a["state"] for a in st["attempts"]] == ["FAILED", "COMPLETED"], st["attempts"]
    assert st["attempts"][1]["resume_step"] >= 8
    log = cli.output(job)
    assert "in-job recovery gives up" in log and "recovery.in_job.max_restarts allows 1" in log, log


STAND_IN_93 = "echo stand-in; exit 93"


def check_closed_93(cli, job: str) -> dict:
    st = cli.wait_state(job, ["FAILED", "GAVE_UP", "COMPLETED", "CANCELLED"], timeout=180, interval=0.5)
    assert st["state"] == "FAILED" and "93" in st["reason"], st
    assert len(st["attempts"]) == 1 and st["attempts"][0]["exit_code"] == 93, st["attempts"]
    assert not [e for e in st["events"] if e["kind"] in ("in_job_restart", "resubmitted", "retry_scheduled")]
    assert [e["kind"] for e in st["events"]].count("stopped") == 1, st["events"]
    return st


@pytest.mark.parametrize("in_job", [True, False], ids=["in_job", "no_in_job"])
def test_exit_93_is_never_restarted_local(cli, in_job):
    body = {"run": STAND_IN_93, "checkpoint": {"root": str(cli.tmp / "ck93")}, "recovery": {"app_error": 5}}
    if in_job:
        body["recovery"]["in_job"] = {"max_restarts": 5}
    job = cli.launch(cli.spec("exit93", body), "local")
    watcher = start_watcher(cli, 0, interval=0.2)
    try:
        check_closed_93(cli, job)
    finally:
        stop_watchers([watcher])


# ---- the same on the netns Slurm cluster
@pytest.mark.slurm
def test_a_killed_run_is_rerun_as_a_new_srun_step_with_no_requeue_slurm(cli, clean_queue):
    base = clean_queue.shared_dir / f"injob-{cli.tmp.name}"
    base.mkdir()
    spec, piddir, root = in_job_spec(cli, base, "injob-slurm", 40, holds=KILLS,
                                     resources={"nodes": 1, "time_limit": "10m"})
    job = cli.launch(spec)
    watcher = start_watcher(cli, 0, interval=0.5)
    try:
        for gen, step in KILLS:
            kill_run(cli, piddir, root, gen, step)
        st = check_in_job_run(cli, job, 2)
    finally:
        stop_watchers([watcher])
    native = st["attempts"][0]["native_id"]
    assert clean_queue.job(native)["Restarts"] == "0"  # Slurm never requeued it


@pytest.mark.slurm
def test_exit_93_is_never_requeued_or_resubmitted_slurm(cli, clean_queue):
    body = {"run": STAND_IN_93, "checkpoint": {"root": str(clean_queue.shared_dir / f"ck93-{cli.tmp.name}")},
            "recovery": {"app_error": 5, "in_job": {"max_restarts": 5}}, "resources": {"time_limit": "5m"}}
    job = cli.launch(cli.spec("exit93", body))
    watcher = start_watcher(cli, 0, interval=0.5)
    try:
        st = check_closed_93(cli, job)
    finally:
        stop_watchers([watcher])
    assert clean_queue.job(st["attempts"][0]["native_id"])["Restarts"] == "0"
