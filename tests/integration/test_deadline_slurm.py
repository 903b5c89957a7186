"""`launcher watch` moves a job with cost.deadline to a Slurm target when the policy says so
(issue 21: "a Slurm target whose expected queue wait the planner knows"), on the real test
cluster: the job rides the plugin cloud's spot (tests/integration/fakecloud replaying a trace),
loses it, waits while its slack allows, and is then resubmitted to the cluster rather than to
on-demand (the cluster is unpriced, so cheaper, and its queue wait, measured on the empty
queue, fits), where it resumes from its committed checkpoint and finishes before its deadline.
The on-demand target (the plugin cloud, 2 s restarts) is there as the dearer guaranteed offer;
it also gives the launch check a restart overhead on this test's time scale (the Slurm
backend declares 3 minutes, longer than the whole deadline here).

The time scale is test_deadline_live.py's (one tick = TICK_S s of wall time; 8 ticks of work),
the deadline 20 ticks, spot for ticks 0-2 and never again (a return to spot is
test_deadline_live.py's and the unit tests' matter; here it would only add restarts whose
real cost on a loaded machine, a Python starting on a node, the policy is not told); the
checkpoint root and the result file live in the cluster's shared directory (its nodes run in
their own network namespaces, on this host's file system). The job's steps sleep half of what
``resources.expected_runtime`` plans for: a Slurm start (a Python on a node of a loaded
machine) and the checkpoints take real time the plan does not know of, and the policy is only
as good as the work estimate it is given (the test is about the move, not the estimate)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from .launcher_cli import LAUNCHER, LauncherCLI

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = Path(__file__).parent / "fakecloud"
TRAIN = ROOT / "examples" / "train.py"

TICK_S = 4.0
SPOT = [1, 1, 1] + [0] * 40
WORK_TICKS, DEADLINE_TICKS = 8, 20


@pytest.mark.timeout(240)
def test_watch_moves_a_deadline_job_to_the_slurm_target_and_it_finishes_in_time(clean_queue, tmp_path):
    trace = tmp_path / "trace.json"
    doc = {"t0": time.time(), "tick_s": TICK_S, "spot": {"east": SPOT}, "prices": {"east": [0.9731] * len(SPOT)}}
    trace.write_text(json.dumps(doc))
    cli = LauncherCLI(tmp_path, clean_queue, {
        "spot": {"backend": "fakecloud", "regions": ["east"], "spot": True, "trace": str(trace), "restart_s": 2},
        "od": {"backend": "fakecloud", "regions": ["east"], "spot": False, "hourly_usd": 3.06, "restart_s": 2}})
    cli.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGIN), cli.env.get("PYTHONPATH")]))
    stamp = time.time_ns()
    root = clean_queue.shared_dir / f"ckpt-deadline-{stamp}"
    out = clean_queue.shared_dir / f"result-deadline-{stamp}.json"
    steps = 80
    spec = cli.spec("dls", {
        "run": f"python3 {TRAIN} --steps {steps} --every 4 --sleep {WORK_TICKS * TICK_S / steps / 2} --result {out}",
        "checkpoint": {"root": str(root)}, "targets": ["spot", "od", "testcl"],
        "resources": {"expected_runtime": f"{int(WORK_TICKS * TICK_S)}s", "time_limit": "10m"},
        "recovery": {"placement_cooldown": f"{int(7 * TICK_S)}s"},
        "cost": {"deadline": f"{int(DEADLINE_TICKS * TICK_S)}s", "total_steps": steps}})

    job = cli.launch(spec, "spot")
    from launcher.state.store import StateStore

    doc["t0"] = StateStore(cli.home).get_job(job).created  # tick 0 is the job's submission
    trace.write_text(json.dumps(doc))
    w = subprocess.run([LAUNCHER, "watch", "--exit-when-idle", "--interval", "1"], env=cli.env, capture_output=True,
                       text=True, timeout=200, cwd=str(tmp_path))
    assert w.returncode == 0, w.stdout + w.stderr
    st = cli.status(job)
    decisions = [e for e in st["events"] if e["kind"] == "deadline"]
    moves = [e for e in st["events"] if e["kind"] == "deadline_move"]
    info = f"{w.stdout}\n{decisions}\n{moves}\n{st['attempts']}"
    assert st["state"] == "COMPLETED", info
    assert json.loads(out.read_text())["steps"] == steps, info

    # the move: decided with its reason and numbers, carried out as a Slurm job that ran
    to_slurm = [m for m in moves if m["to"] == "queue:testcl"]
    assert to_slurm and to_slurm[0]["frm"] == "wait" and to_slurm[0]["overhead_h"] > 0, info
    (decided,) = [e for e in decisions if e["placement"] == "queue:testcl"][:1]
    assert "behind the reserve" in decided["reason"] or decided["reason"].startswith("safety net"), info
    assert "slack_h" in decided and "reserve_h" in decided, info
    on_slurm = [a for a in st["attempts"] if a["target"] == "testcl"]
    assert on_slurm and on_slurm[0]["native_id"] == str(to_slurm[0]["native_id"]), info
    # it ran there (the test cluster keeps no accounting: the attempt row says, as watch saw it)
    assert on_slurm[0]["state"] in {"COMPLETED", "CANCELLED"} and on_slurm[0]["started"], info
    # the first attempt was on spot; the job resumed from the checkpoint (steps were not redone from 0)
    assert st["attempts"][0]["target"] == "spot", info

    rep = json.loads(cli.run("report", job, "--json").stdout)["deadline"]
    print("held:", [e["placement"] for e in decisions], "moves:", [(m["frm"], m["to"]) for m in moves], rep)
    assert rep["met"] is True and rep["margin_h"] > 0, (rep, info)
    assert rep["moves"] == len(moves) and rep["queue_hours"] > 0, (rep, info)
