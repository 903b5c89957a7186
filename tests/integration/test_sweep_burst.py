"""Burst per element on the real Slurm test cluster: with the batch partition full, the elements
still pending in the array past ``burst.after`` are taken out of it (``scancel <array>_<i>``)
and run on a fake cloud plugin (tests/integration/fakecloud); the element that runs on Slurm
stays in the array. Every element runs exactly once."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, job_id_of

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = Path(__file__).parent / "fakecloud"
N = 4


def _pending_tasks(cluster, array: str) -> set:
    out = cluster.run("squeue", "-h", "-r", "-j", array, "-t", "PENDING", "-o", "%i", check=False).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


@pytest.fixture(params=["native-22.05", "docker-24.11"])
def any_cluster(request):
    if request.param == "docker-24.11":
        c = request.getfixturevalue("docker_slurm_2411")
        c.reset()
        return c
    return request.getfixturevalue("clean_queue")


def test_scancel_of_one_pending_array_task_leaves_the_others_pending(any_cluster):
    # what burst per element relies on: cancelling <array>_<i> of a pending task cancels it alone
    # (Slurm 22.05 here and 24.11 in Docker)
    clean_queue = any_cluster
    blocker = clean_queue.sbatch("-N4", "--exclusive", "-o", "/dev/null", script="#!/bin/bash\nsleep 600\n")
    try:
        clean_queue.wait(blocker, "RUNNING")
        array = clean_queue.sbatch("--array=0-3%2", "-o", "/dev/null", script="#!/bin/bash\nsleep 1\n")
        poll("array pending", lambda: len(_pending_tasks(clean_queue, array)) == 4, timeout=30, interval=0.5)
        clean_queue.run("scancel", f"{array}_1")
        poll("task 1 gone", lambda: _pending_tasks(clean_queue, array) == {f"{array}_{i}" for i in (0, 2, 3)},
             timeout=30, interval=0.5, detail=lambda: str(_pending_tasks(clean_queue, array)))
    finally:
        clean_queue.run("scancel", blocker, check=False)
        clean_queue.run("scancel", array, check=False)


def test_pending_elements_move_to_the_cloud_and_each_runs_once(clean_queue, tmp_path):
    cli = LauncherCLI(tmp_path, clean_queue, {"cloud": {"backend": "fakecloud", "hourly_usd": 2.0}})
    cli.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGIN), cli.env.get("PYTHONPATH")]))
    blocker = clean_queue.sbatch("-N3", "--exclusive", "-o", "/dev/null", script="#!/bin/bash\nsleep 600\n")
    clean_queue.wait(blocker, "RUNNING")
    shared = clean_queue.shared_dir / f"sweep-burst-{time.time_ns()}"
    shared.mkdir()
    spec = cli.spec("swb", {
        "run": f"python3 {ROOT / 'examples' / 'train.py'} --steps 20 --every 5 --sleep 0.4 "
               f"--result {shared}/result-$LAUNCHER_SWEEP_INDEX.json",
        "checkpoint": {"root": str(shared / "ck")}, "resources": {"time_limit": "10m"},
        "slurm": {"extra": ["--exclusive"]},  # one element per node: one node is free
        "burst": {"after": "6s", "to": ["cloud"]},
        "sweep": {"grid": {"lr": [0.1, 0.2, 0.3, 0.4]}, "max_parallel": N}})
    sweep_id = job_id_of(cli.run("launch", spec, "--target", "testcl"))
    rows = {i: f"{sweep_id}-e{i}" for i in range(N)}
    array = cli.status(rows[0])["attempts"][0]["native_id"].split("_")[0]
    poll("one element runs on Slurm", lambda: len(_pending_tasks(clean_queue, array)) == N - 1, timeout=60,
         interval=0.5)

    def done():
        cli.run("watch", "--once")
        s = json.loads(cli.run("status", sweep_id, "--json").stdout)
        return s if s["counts"] == {"COMPLETED": N} else None

    try:
        poll(f"{sweep_id} done", done, timeout=240, interval=1,
             detail=lambda: cli.run("status", sweep_id).stdout)
    finally:
        clean_queue.run("scancel", blocker, check=False)
    targets = {i: cli.status(j)["target"] for i, j in rows.items()}
    assert sorted(targets.values()) == ["cloud"] * (N - 1) + ["testcl"], targets
    for i, job in rows.items():
        st = cli.status(job)
        kinds = [e["kind"] for e in st["events"]]
        if targets[i] == "testcl":  # stayed in the array
            assert "burst" not in kinds and [a["state"] for a in st["attempts"]] == ["COMPLETED"]
            continue
        assert "burst" in kinds and "burst_moved" in kinds, st["events"]
        moved = [e for e in st["events"] if e["kind"] == "burst_moved"][0]
        assert moved["cancelled_native_id"] == f"{array}_{i}" and moved["to"] == "cloud"
        assert [a["state"] for a in st["attempts"]] == ["CANCELLED", "COMPLETED"]
    for i in range(N):
        assert json.loads((shared / f"result-{i}.json").read_text())["steps"] == 20
        gens = json.loads((shared / "ck" / f"element-{i:04d}" / "GENERATIONS.json").read_text())["history"]
        assert len(gens) == 1, (i, gens)  # one start in all: each element ran once
    # no task of the array is left, and none of the moved ones ever ran on Slurm
    assert not _pending_tasks(clean_queue, array)
