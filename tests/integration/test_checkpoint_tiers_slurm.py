"""Multi-tier checkpoints through the real Slurm backend (tests/cluster): the rendered sbatch
script exports the tier settings, resolves the resume point at every start, and srun starts
one rank per node. The nodes share this machine's disk, so each node's "local" tier is its own
directory (``{node}``), reached by the other node as a path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from launcher.checkpoint import latest, open_store, read_generations
from tests.fixtures.polling import poll

pytestmark = pytest.mark.slurm

HERE = os.path.dirname(os.path.abspath(__file__))
RANK = os.path.join(HERE, "tiers_rank.py")
TRAIN = {"TRAIN_STEPS": "60", "TRAIN_EVERY": "10", "TRAIN_DIM": "3000"}


def reference(tmp):
    shas = []
    for r in range(2):
        env = {"PATH": os.environ["PATH"], "RANK": str(r), "WORLD_SIZE": "2", "TRAIN_RESULT_DIR": str(tmp), **TRAIN}
        subprocess.run([sys.executable, RANK], env=env, check=True, timeout=300)
        shas.append(json.loads((tmp / ("result-%d.json" % r)).read_text())["sha256"])
    return shas


def test_a_requeued_two_node_job_that_lost_a_node_resumes_from_the_peer_copy_bit_for_bit(cli, clean_queue, tmp_path):
    ref = reference(tmp_path)
    ns = time.time_ns()
    shared = clean_queue.shared_dir
    root, local, results = shared / f"tiers-root-{ns}", shared / f"tiers-local-{ns}", shared / f"tiers-res-{ns}"
    results.mkdir()
    env = " ".join(f"{k}={v}" for k, v in TRAIN.items())
    spec = cli.spec("tiers", {
        "run": f"RANK=$LAUNCHER_RANK WORLD_SIZE=2 TRAIN_SLEEP=0.25 TRAIN_RESULT_DIR={results} {env} python3 {RANK}",
        "checkpoint": {"root": str(root), "local": str(local / "node-{node}"), "peers": 1},
        "resources": {"nodes": 2, "time_limit": "10m"}})
    job = cli.launch(spec)
    native = cli.wait_state(job, "RUNNING")["attempts"][-1]["native_id"]
    poll("a step >= 20 committed under the root", lambda: (lambda e: e if e and e.step >= 20 else None)(
        latest(open_store(str(root)))), timeout=120, interval=0.5)
    clean_queue.run("scontrol", "requeue", native)
    for _ in range(3):  # node 1's disk is lost while the job waits to start again
        shutil.rmtree(local / "node-1", ignore_errors=True)
        time.sleep(0.5)
    cli.wait_state(job, "COMPLETED", timeout=240, interval=1)
    h = read_generations(open_store(str(root))).history
    assert len(h) == 2 and h[1]["resume_tier"] == "peer" and h[1]["resume_step"] >= 20, h
    assert [json.loads((results / ("result-%d.json" % r)).read_text())["sha256"] for r in range(2)] == ref
    assert [json.loads((results / ("result-%d.json" % r)).read_text())["resumed_from"] for r in range(2)] == \
        [h[1]["resume_step"]] * 2
    assert "resumes from" in cli.output(job) and ", peer tier" in cli.output(job)
