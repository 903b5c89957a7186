"""Run identity on the real Slurm test cluster: a relaunch of a finished run says it
resumes that run at its last step, keeps its LAUNCHER_SEED and trains nothing; `launch
--fresh` starts over from step 0, and when Slurm itself restarts the fresh job (a real
preemption, requeued by the scheduler) the rerun script resumes the fresh run's own
checkpoint, never the older run's, which stay on disk as stale."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import job_id_of

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train.py"


def body(root, result, steps, every, sleep):
    return {"run": f"python3 {TRAIN} --steps {steps} --every {every} --sleep {sleep} --result {result}",
            "checkpoint": {"root": str(root), "keep": 10},
            "resources": {"nodes": 1, "cpus_per_node": 2, "time_limit": "10m"}}


def record(root, gen) -> dict:
    return json.loads((root / ".launcher" / "attempts" / f"g{gen}.json").read_text())


def states(cli, root) -> list:
    return [(e["step"], e["generation"], e["state"])
            for e in json.loads(cli.run("checkpoints", root, "--json").stdout)]


def test_relaunch_resumes_with_the_same_seed_and_fresh_survives_a_slurm_requeue(cli, clean_queue, tmp_path):
    root = clean_queue.shared_dir / f"ckpt-ident-{time.time_ns()}"
    result = clean_queue.shared_dir / f"result-ident-{time.time_ns()}.json"
    spec = cli.spec("ident", body(root, result, 6, 3, 0))
    first = job_id_of(cli.run("launch", spec, "--target", "testcl"))
    cli.wait_state(first, "COMPLETED", timeout=180, interval=1)
    seed1 = record(root, 1)["seed"]
    assert seed1 and states(cli, root) == [(6, 1, "committed"), (3, 1, "committed")]

    p = cli.run("render", spec, "--target", "testcl")
    assert f"export LAUNCHER_SEED={seed1}\n" in p.stdout
    p = cli.run("launch", spec, "--target", "testcl")
    second = job_id_of(p)
    assert f"this launch resumes run {first} (COMPLETED) from step 6" in p.stderr
    assert "had already finished" in p.stderr and "--fresh" in p.stderr
    cli.wait_state(second, "COMPLETED", timeout=180, interval=1)
    assert record(root, 2)["seed"] == seed1 and record(root, 2)["resume_step"] == 6
    assert states(cli, root) == [(6, 1, "committed"), (3, 1, "committed")]     # trained nothing

    # --fresh, a longer run, preempted once for real: Slurm requeues and reruns the same script
    # (the first start trains at 2 s a step, so the preemption lands well before its last
    # step even on a loaded machine; the rerun trains at 0.2 s a step)
    slow_first = '$([ "${SLURM_RESTART_COUNT:-0}" = 0 ] && echo 2 || echo 0.2)'
    spec = cli.spec("ident", body(root, result, 30, 3, slow_first))
    p = cli.run("launch", spec, "--target", "testcl", "--fresh")
    third = job_id_of(p)
    assert "--fresh: starting over from step 0" in p.stderr
    cli.wait_state(third, "RUNNING")
    poll("a commit of generation 3", lambda: [s for s, g, st in states(cli, root) if g == 3 and st == "committed"],
         timeout=90, interval=0.5)
    high = cli.spec("hipri", {"run": "sleep 2", "resources": {"nodes": 4, "time_limit": "5m"},
                              "slurm": {"partition": "high"}})
    cli.run("launch", high, "--target", "testcl")
    st = cli.wait_state(third, "COMPLETED", timeout=300, interval=1)
    assert len(st["attempts"]) >= 2 and st["attempts"][0]["state"] == "PREEMPTED"

    g3, g4 = record(root, 3), record(root, 4)
    assert g3["job_id"] == third and g3["resume_step"] == -1
    assert g4["job_id"] == third and g4["resume_step"] >= 3 and ".g3" in g4["resume_from"]  # its own, not g1's
    gens = json.loads((root / "GENERATIONS.json").read_text())["history"]
    assert [h.get("fresh") for h in gens if h["job_id"] == third] == [True] + [None] * (len(st["attempts"]) - 1)
    log = cli.run("logs", third).stdout
    assert "starts over" in log and re.search(r"train: resumed from \S+\.g3 at step", log)
    final = states(cli, root)
    assert (6, 1, "stale") in final and (3, 1, "stale") in final
    assert final[0][0] == 30 and final[0][1] > 3 and final[0][2] == "committed"
    assert all(p.exists() for p in (root / "step-000000006.g1" / "COMMIT.json",
                                    root / "step-000000003.g1" / "COMMIT.json"))
    assert json.loads(result.read_text())["steps"] == 30
