"""Exactly-once recovery with several `launcher watch` processes (real processes, real
jobs on the local target): every (job, attempt) runs exactly once, whatever the number
of watchers, and when one of them is killed in the middle; on both engines of the state store
(the watchers share one SQLite file, or one PostgreSQL server)."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, start_watcher, starts_by_job, stop_watchers, wait_all_closed

ATTEMPTS = 4  # every job ends its first 3 attempts (preempted or killed), then completes


def job_program(tmp: Path) -> Path:
    """Records each start (job id, LAUNCHER_ATTEMPT), commits a step, then exits 75
    (preempted, checkpointed), or is killed by SIGKILL, until attempt ATTEMPTS completes."""
    f = tmp / "job.py"
    f.write_text(textwrap.dedent(f"""
        import os, signal, sys, time
        from launcher import jobside
        a = int(os.environ["LAUNCHER_ATTEMPT"])
        with open(os.environ["STARTS"], "a") as f:
            f.write(os.environ["LAUNCHER_JOB_ID"] + " " + str(a) + "\\n")
        with jobside.save(jobside.resume_step() + 1) as d:
            open(os.path.join(str(d), "w.bin"), "w").write("x")
        time.sleep(0.2)
        if a >= {ATTEMPTS}:
            sys.exit(0)
        if a % 2:
            sys.exit(75)
        os.kill(os.getpid(), signal.SIGKILL)
    """))
    return f


def launch_jobs(cli: LauncherCLI, n: int, starts: Path) -> list[str]:
    prog = job_program(cli.tmp)
    jobs = []
    for i in range(n):
        spec = cli.spec(f"eo{i}", {"run": f"{sys.executable} {prog}", "env": {"STARTS": str(starts)},
                                   "checkpoint": {"root": str(cli.tmp / f"ck{i}")},
                                   "recovery": {"preemption": 10, "app_error": 10}})
        jobs.append(cli.launch(spec, "local"))
    return jobs


@pytest.fixture
def cli(cli, state_engine):
    cli.env["LAUNCHER_CLAIM_TTL"] = "3"  # a killed watcher's claim is taken over quickly
    cli.env["LAUNCHER_STATE_URL"] = state_engine.url  # on SQLite and on PostgreSQL (tests.fixtures.stores)
    return cli


def test_three_watchers_and_a_killed_one_run_every_attempt_exactly_once(cli):
    starts = cli.tmp / "starts.txt"
    starts.touch()
    jobs = launch_jobs(cli, 8, starts)
    procs = [start_watcher(cli, i) for i in range(3)]
    try:
        # kill one watcher with SIGKILL once recovery is under way, and start a fourth
        poll("recovery under way", lambda: sum(len(v) for v in starts_by_job(starts).values()) >= 12,
             timeout=240, interval=0.1)
        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait()
        procs.append(start_watcher(cli, 3))
        wait_all_closed(cli, jobs, timeout=480, interval=1)
    finally:
        stop_watchers(procs)
    seen = starts_by_job(starts)
    for job in jobs:
        assert seen[job] == list(range(1, ATTEMPTS + 1)), (job, seen[job], (cli.tmp / "watch1.log").read_text())
        st = cli.status(job)
        assert st["state"] == "COMPLETED", st
        assert [a["attempt"] for a in st["attempts"]] == list(range(1, ATTEMPTS + 1))
        assert [a["state"] for a in st["attempts"]] == ["PREEMPTED", "FAILED", "PREEMPTED", "COMPLETED"]
        resubmits = [e for e in st["events"] if e["kind"] == "resubmitted"]
        assert [e["attempt"] for e in resubmits] == [2, 3, 4], resubmits
        assert [a["resume_step"] for a in st["attempts"]] == [-1, 0, 1, 2]


def test_a_watch_killed_between_submit_and_record_is_adopted_not_submitted_again(cli, monkeypatch):
    from launcher.api.context import App
    from launcher.recovery import watch

    starts = cli.tmp / "starts.txt"
    starts.touch()
    (job,) = launch_jobs(cli, 1, starts)
    cli.wait_state(job, "PREEMPTED", timeout=60)
    for k, v in cli.env.items():
        monkeypatch.setenv(k, v)
    app = App()

    def killed(*a, **k):  # the watch dies right after the job started, before it wrote anything
        raise KeyboardInterrupt("watch killed mid-recovery")

    monkeypatch.setattr(app.store, "record_submission", killed)
    with pytest.raises(KeyboardInterrupt):
        watch.cycle(app)
    app.close()
    time.sleep(3.1)  # the dead watcher's claim expires (LAUNCHER_CLAIM_TTL=3)
    app2 = App()
    outcomes = watch.cycle(app2)
    app2.close()
    assert [o.action for o in outcomes if o.job_id == job] == ["resubmitted"]
    st = cli.status(job)
    assert [a["attempt"] for a in st["attempts"]] == [1, 2]
    assert [e.get("found_existing") for e in st["events"] if e["kind"] == "resubmitted"] == [True]
    poll("attempt 2 ran", lambda: 2 in starts_by_job(starts)[job], timeout=30)
    time.sleep(1.0)
    assert starts_by_job(starts)[job][:2] == [1, 2]
