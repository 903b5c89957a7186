"""Burst end to end: a job stuck behind a full Slurm partition bursts to a cloud backend
(a plugin registered through the entry-point group, tests/integration/fakecloud, which the
launcher names nowhere), the Slurm copy is cancelled, and the job finishes exactly once.
Of the two plugin targets in ``burst.to`` the planner picks the cheaper one from the
offers the plugin prices itself with, and `launcher report` accounts for the cloud copy."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = Path(__file__).parent / "fakecloud"


def test_stuck_job_bursts_to_the_cloud_and_finishes_once(clean_queue, tmp_path):
    cli = LauncherCLI(tmp_path, clean_queue, {"cloud": {"backend": "fakecloud", "hourly_usd": 2.0},
                                              "pricey": {"backend": "fakecloud", "hourly_usd": 20.0}})
    cli.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGIN), cli.env.get("PYTHONPATH")]))
    backends = {b["name"]: b for b in json.loads(cli.run("backends", "--json").stdout)}
    assert backends["fakecloud"]["status"] == "ok" and backends["fakecloud"]["source"] == "fakecloud"

    blocker = clean_queue.sbatch("-N4", "--exclusive", "-o", "/dev/null", script="#!/bin/bash\nsleep 600\n")
    clean_queue.wait(blocker, "RUNNING")
    root = clean_queue.shared_dir / f"ckpt-burst-{time.time_ns()}"
    result = clean_queue.shared_dir / f"result-burst-{time.time_ns()}.json"
    spec = cli.spec("bursty", {
        "run": f"python3 {ROOT / 'examples' / 'train.py'} --steps 20 --every 5 --result {result}",
        "checkpoint": {"root": str(root)}, "resources": {"time_limit": "10m"},
        "burst": {"after": "3s", "to": ["pricey", "cloud"]}})
    job = cli.launch(spec, "testcl")
    slurm_native = cli.status(job)["attempts"][0]["native_id"]


    def done():
        cli.run("watch", "--once")
        st = cli.status(job)
        return st if any(e["kind"] == "done" for e in st["events"]) else None

    try:
        st = poll(f"{job} done", done, timeout=120, interval=1)
    finally:
        clean_queue.run("scancel", blocker)
    events = [e["kind"] for e in st["events"]]
    assert "burst" in events and "burst_won" in events and "done" in events, st["events"]
    won = [e for e in st["events"] if e["kind"] == "burst_won"][0]
    assert won["winner"] == "cloud" and won["cancelled_native_id"] == slurm_native
    assert st["state"] == "COMPLETED" and st["target"] == "cloud"
    assert [a["state"] for a in st["attempts"]] == ["CANCELLED", "COMPLETED"]
    # the Slurm copy never ran, even once the partition was free again
    slurm_job = clean_queue.wait(slurm_native, lambda j: not j or j.get("JobState") == "CANCELLED", timeout=30)
    assert not slurm_job or slurm_job.get("RunTime") in ("00:00:00", None)
    assert json.loads(result.read_text())["steps"] == 20
    rep = json.loads(cli.run("report", job, "--json").stdout)
    assert [a["state"] for a in rep["attempts"]] == ["CANCELLED", "COMPLETED"]
    cloud = rep["attempts"][1]
    assert (cloud["target"], cloud["last_commit_step"]) == ("cloud", 20) and cloud["billable_s"] > 0
    assert cloud["cost_source"] == "cloud: $2/h recorded at submit" and cloud["cost_usd"] > 0
    gens = json.loads((root / "GENERATIONS.json").read_text())["history"]
    assert len(gens) == 1, gens  # one start in all: the job ran once
