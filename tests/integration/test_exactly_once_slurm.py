"""Exactly-once recovery on the real test cluster: three `launcher watch` processes over
jobs that fail (watch resubmits them) and requeue themselves (Slurm restarts them in
place): every (job, attempt) runs once, and every dedupe token reaches Slurm once."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from .launcher_cli import start_watcher, starts_by_job, stop_watchers, wait_all_closed

pytestmark = pytest.mark.slurm

ATTEMPTS = 4


@pytest.fixture
def cli(cli):
    cli.env["LAUNCHER_CLAIM_TTL"] = "10"
    return cli


def job_program(cluster) -> str:
    """Attempt 1 and 3 fail (exit 1: watch resubmits), attempt 2 requeues itself (Slurm
    restarts it in place as attempt 3), attempt 4 completes; each commits a step first."""
    f = cluster.shared_dir / f"eo-job-{os.getpid()}.py"
    f.write_text(textwrap.dedent(f"""
        import os, subprocess, sys, time
        from launcher import jobside
        a = int(os.environ["LAUNCHER_ATTEMPT"])
        with open(os.environ["STARTS"], "a") as f:
            f.write(os.environ["LAUNCHER_JOB_ID"] + " " + str(a) + "\\n")
        with jobside.save(jobside.resume_step() + 1) as d:
            open(os.path.join(str(d), "w.bin"), "w").write("x")
        if a >= {ATTEMPTS}:
            sys.exit(0)
        if a == 2:
            subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]], check=True)
            time.sleep(120)
        sys.exit(1)
    """))
    return str(f)


def test_three_watchers_on_slurm_submit_and_run_every_attempt_exactly_once(cli, clean_queue):
    prog = job_program(clean_queue)
    starts = clean_queue.shared_dir / f"eo-starts-{os.getpid()}.txt"
    starts.write_text("")
    jobs = []
    for i in range(4):
        spec = cli.spec(f"eos{i}", {"run": f"{sys.executable} {prog}", "env": {"STARTS": str(starts)},
                                    "checkpoint": {"root": str(clean_queue.shared_dir / f"eo-ck-{os.getpid()}-{i}")},
                                    "recovery": {"app_error": 10}, "resources": {"time_limit": "5m"}})
        jobs.append(cli.launch(spec))
    procs = [start_watcher(cli, i, interval=0.5) for i in range(3)]
    try:
        wait_all_closed(cli, jobs, timeout=420, interval=2)
    finally:
        stop_watchers(procs)
    seen = starts_by_job(starts)
    comments = clean_queue.run("squeue", "-h", "-t", "all", "-o", "%k").stdout.split()
    logs = "\n".join((cli.tmp / f"watch{i}.log").read_text() for i in range(3))
    for job in jobs:
        st = cli.status(job)
        assert seen[job] == [1, 2, 3, 4], (job, seen[job], st, logs)
        assert st["state"] == "COMPLETED", st
        assert [a["attempt"] for a in st["attempts"]] == [1, 2, 3, 4]
        assert [e["attempt"] for e in st["events"] if e["kind"] == "resubmitted"] == [2, 4]
        assert [e["attempt"] for e in st["events"] if e["kind"] == "restarted"] == [3]
        for n in (1, 2, 4):
            assert comments.count(f"launcher:{job}:{n}") == 1, (job, n, comments)
