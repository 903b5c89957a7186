"""`launcher watch` keeps a job with cost.deadline on schedule, end to end (issue 21): the plugin
cloud (tests/integration/fakecloud) replays a small availability trace, a checkpointing job
(examples/train.py) rides spot, waits when spot goes, moves to on-demand when its slack runs
low and back to spot when spot returns, and finishes before its deadline. Its decisions and
cost are those of the same trace replayed through the benchmark's simulator
(bench/deadline_replay.py, the `launcher` policy).

Time scale: one trace tick is TICK_S = 6 s of wall time (the bench's tick is 600 s); the work
is 8 ticks (80 steps of 0.6 s), the deadline 14 ticks. (At 4 s a tick, a run beside the Slurm
tier's deadline test at load 14 fell behind its plan: the Python starts and the restore are
fixed costs a shorter tick cannot absorb.) The trace: spot for ticks 0-2, none for
3-9, spot again from 10. The launcher learns availability the way `watch` does, from what
happened to its attempts: a preempted (or refused) region is unavailable for
recovery.placement_cooldown, set here to the 7 ticks the trace keeps it down, so the live
policy knows what the simulator's policy is told. Tolerance: the decisions (held placements,
consecutive repeats merged) are the same; the cost is within two ticks of on-demand of the
simulator's (the live job bills by the second, the simulator by the tick, and wall-clock ticks
jitter on a loaded machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .launcher_cli import LAUNCHER, LauncherCLI

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = Path(__file__).parent / "fakecloud"
TRAIN = ROOT / "examples" / "train.py"
sys.path.insert(0, str(ROOT / "bench"))

import deadline_replay as rp  # noqa: E402

TICK_S = 6.0
SPOT = [1, 1, 1] + [0] * 7 + [1] * 30
SPOT_USD, OD_USD = rp.SINGLE_SPOT, rp.SINGLE_OD
WORK_TICKS, DEADLINE_TICKS = 8, 14


def _compressed(xs):
    return [x for i, x in enumerate(xs) if i == 0 or xs[i - 1] != x]


def simulated(overhead_h: float):
    """The same trace through the bench's simulator: (held placements merged, cost $, finish h)."""
    g = TICK_S / 3600
    world = rp.World(["east"], g, [[bool(x) for x in SPOT]], [SPOT_USD], [OD_USD])
    pol, held = rp.Launcher(), []

    class Recorded(rp.Policy):
        def reset(self, r):
            pol.reset(r)

        def act(self, r):
            k = pol.act(r)
            held.append({rp.NONE: "wait", rp.SPOT: "spot", rp.OD: "on_demand"}[k[0]])
            return k

    r = rp.simulate(Recorded(), world, 0, WORK_TICKS * g, DEADLINE_TICKS * g, overhead_h)
    return _compressed(held), r.cost, r.finish


@pytest.mark.timeout(360)
def test_watch_meets_the_deadline_as_the_replay_does(tmp_path):
    trace = tmp_path / "trace.json"
    doc = {"t0": time.time(), "tick_s": TICK_S, "spot": {"east": SPOT}, "prices": {"east": [SPOT_USD] * len(SPOT)}}
    trace.write_text(json.dumps(doc))
    cli = LauncherCLI(tmp_path, None, {
        "spot": {"backend": "fakecloud", "regions": ["east"], "spot": True, "trace": str(trace), "restart_s": 2},
        "od": {"backend": "fakecloud", "regions": ["east"], "spot": False, "hourly_usd": OD_USD, "restart_s": 2}})
    cli.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGIN), cli.env.get("PYTHONPATH")]))
    out, root = tmp_path / "out.json", tmp_path / "ck"
    steps = 80
    spec = cli.spec("dl", {
        "run": f"python3 {TRAIN} --steps {steps} --every 4 --sleep {WORK_TICKS * TICK_S / steps} --result {out}",
        "checkpoint": {"root": str(root)}, "targets": ["spot", "od"],
        "resources": {"expected_runtime": f"{int(WORK_TICKS * TICK_S)}s", "time_limit": "1h"},
        "recovery": {"placement_cooldown": f"{int(7 * TICK_S)}s"},
        "cost": {"deadline": f"{int(DEADLINE_TICKS * TICK_S)}s", "total_steps": steps}})

    # refused at launch: not even on-demand finishes 8 ticks of work in 7
    tight = cli.spec("tight", {**json.loads(json.dumps(_body(spec))), "cost": {"deadline": f"{int(7 * TICK_S)}s", "total_steps": steps}})
    p = cli.run("launch", tight, "--target", "spot", check=False)
    assert p.returncode != 0 and "cost.deadline cannot be met" in p.stderr , p.stderr
    assert "needs" in p.stderr and "h too many" in p.stderr

    job = cli.launch(spec, "spot")
    from launcher.state.store import StateStore

    created = StateStore(cli.home).get_job(job).created
    doc["t0"] = created  # the trace's tick 0 is the job's submission, as in the simulator
    trace.write_text(json.dumps(doc))
    w = subprocess.run([LAUNCHER, "watch", "--exit-when-idle", "--interval", "1"], env=cli.env, capture_output=True,
                       text=True, timeout=300, cwd=str(tmp_path))
    assert w.returncode == 0, w.stdout + w.stderr
    st = cli.status(job)
    assert st["state"] == "COMPLETED", (st, w.stdout)
    assert json.loads(out.read_text())["steps"] == steps

    decisions = [e for e in st["events"] if e["kind"] == "deadline" and e["reason"] != "done"]
    moves = [e for e in st["events"] if e["kind"] == "deadline_move"]
    assert decisions and all("reason" in e and "slack_h" in e for e in decisions if e["placement"] != "wait"), decisions
    held = _compressed([e["placement"].partition(":")[0] for e in decisions])
    rep = json.loads(cli.run("report", job, "--json").stdout)["deadline"]
    expect, sim_cost, sim_finish = simulated(decisions[-1]["overhead_h"])
    info = f"live {held} {rep}; simulated {expect} ${sim_cost:.5f}\n{w.stdout}\n{decisions}\n{moves}"
    assert held[:len(expect)] == expect, info
    assert [m["to"].partition(":")[0] for m in moves] == [k for k in expect[1:] if k != "wait"], info
    assert rep["met"] is True and rep["margin_h"] > 0, rep
    assert rep["total_usd"] is not None, info
    assert abs(rep["total_usd"] - sim_cost) <= 2 * TICK_S / 3600 * OD_USD, info
    assert rep["spot_hours"] > 0 and rep["on_demand_hours"] > 0 and rep["moves"] == len(moves)
    assert rep["on_demand_only_usd"] == pytest.approx(WORK_TICKS * TICK_S / 3600 * OD_USD)
    text = cli.run("report", job).stdout
    assert "deadline " in text and "on-demand only" in text
    assert "event deadline" in cli.run("status", job).stdout


def _body(spec_path: Path) -> dict:
    import yaml

    d = yaml.safe_load(spec_path.read_text())
    d.pop("name")
    return d
