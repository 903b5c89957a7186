"""`launcher report SWEEP` and `launcher cancel SWEEP` on the real Slurm test cluster.

A four-element sweep whose program reports metrics with jobside.report and commits a
checkpoint per step: elements 0 and 2 complete, element 1 fails (and `watch` gives it up: GAVE_UP),
element 3 runs on until it is cancelled. The sweep report's sums must equal the elements'
own `launcher report ELEMENT --json` figures, its categories must add up, and its best
element must be the one with the lowest final loss (the sweep's early_stop metric). Cancel
must say, per element, what was true: finished before, cancelled now, cancelled before."""

from __future__ import annotations

import json
import textwrap

import pytest

from launcher.state.watchers import user_name
from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI

pytestmark = pytest.mark.slurm

PRICE = 2.5  # $/GPU-hour of the test target
BASE = [0.3, 0.25, 0.1, 0.4]  # element x's final loss is BASE[x] + 1/3
ACC = [0.9, 0.95, 0.5, 0.7]
PROGRAM = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
    from launcher import jobside
    x = int(os.environ["LAUNCHER_PARAM_X"])
    for step in range(max(1, jobside.resume_step() + 1), 4):
        if x == 1 and step == 3:
            sys.exit(3)  # element 1 fails before its last step
        with jobside.save(step) as d:
            open(os.path.join(d, "w.txt"), "w").write(str(step))
        jobside.report(step, loss=%r[x] + 1.0 / step, acc=%r[x])
        time.sleep(0.3)
    if x == 3:
        time.sleep(600)  # runs on until cancelled
""" % (BASE, ACC))


@pytest.fixture
def cli(clean_queue, tmp_path):
    tmp = clean_queue.shared_dir / f"sweeprep-{tmp_path.name}"  # seen by every node
    tmp.mkdir()
    target = {"backend": "slurm", "slurm_conf": str(clean_queue.conf), "partition": "batch", "facts_ttl": 0,
              "gpu_hour_usd": PRICE}
    return LauncherCLI(tmp, clean_queue, extra_targets={"testcl": target})


def _launch(cli) -> str:
    prog = cli.tmp / "train.py"
    prog.write_text(PROGRAM)
    spec = cli.spec("swr", {
        "run": ["python3", "-I", "-S", str(prog)], "workdir": str(cli.tmp),
        "checkpoint": {"root": str(cli.tmp / "ck")}, "recovery": {"app_error": 0},
        "resources": {"gpus_per_node": 1, "time_limit": "10m"},
        "sweep": {"points": [{"x": i} for i in range(4)], "max_parallel": 4,
                  "early_stop": {"metric": "loss", "mode": "min", "rungs": [1000]}}})
    p = cli.run("launch", spec, "--target", "testcl")
    return p.stdout.split(":")[0].strip()


def _wait_for_three_ended_and_one_running(cli, sweep_id) -> None:
    def settled():
        cli.run("watch", "--once")  # gives element 1 up (app_error: 0)
        s = cli.status(sweep_id)
        states = [e["state"] for e in s["elements"]]
        return states == ["COMPLETED", "GAVE_UP", "COMPLETED", "RUNNING"]

    def detail() -> str:
        logs = [cli.run("logs", sweep_id, "--element", i, check=False).stdout[-2000:] for i in range(4)]
        return json.dumps(cli.status(sweep_id)["elements"]) + "\n" + "\n".join(logs)

    poll("elements 0, 2 completed, 1 given up, 3 running", settled, timeout=300, interval=2, detail=detail)
    poll("element 3 reported step 3", lambda: _reported_step(cli, 3) >= 3, timeout=60, interval=1)


def _reported_step(cli, index: int) -> int:
    from launcher.checkpoint.metrics import read_metrics

    return max(read_metrics(str(cli.tmp / "ck" / f"element-{index:04d}")), default=-1)


def _events(cli, job: str) -> list[str]:
    return [e["kind"] for e in cli.status(job)["events"]]


def test_cancel_and_report_of_a_sweep_with_a_failed_and_a_cancelled_element(cli, clean_queue):
    sweep_id = _launch(cli)
    _wait_for_three_ended_and_one_running(cli, sweep_id)
    before = {i: _events(cli, f"{sweep_id}-e{i}") for i in range(3)}

    out = cli.run("cancel", sweep_id).stdout
    lines = out.splitlines()
    assert f"{sweep_id}-e0: had already finished: COMPLETED; nothing to cancel" in lines, out
    assert f"{sweep_id}-e2: had already finished: COMPLETED; nothing to cancel" in lines, out
    assert any(line.startswith(f"{sweep_id}-e1: had already finished: GAVE_UP (gave up: ") for line in lines), out
    assert f"{sweep_id}-e3: closed as CANCELLED; `launcher watch` will not resume it" in lines, out
    assert lines[-1] == f"sweep {sweep_id}: 4 element(s): 1 cancelled now, 3 had already finished", out
    assert {i: _events(cli, f"{sweep_id}-e{i}") for i in range(3)} == before  # nothing written for them
    assert "cancelled" in _events(cli, f"{sweep_id}-e3")
    assert not clean_queue.run("squeue", "-h", check=False).stdout.strip()

    out = cli.run("cancel", sweep_id, "--element", 3).stdout
    assert out.strip() == f"{sweep_id}-e3: was already cancelled: CANCELLED (cancelled by {user_name()}); nothing to do", out
    out = cli.run("cancel", sweep_id).stdout
    assert out.splitlines()[-1] == \
        f"sweep {sweep_id}: 4 element(s): 0 cancelled now, 1 already cancelled, 3 had already finished", out

    # ---- the report, every element closed (so no figure moves between the calls below)
    d = json.loads(cli.run("report", sweep_id, "--json").stdout)
    own = {i: json.loads(cli.run("report", f"{sweep_id}-e{i}", "--json").stdout) for i in range(4)}
    assert d["size"] == 4 and d["counts"] == {"COMPLETED": 2, "CANCELLED": 1, "GAVE_UP": 1}, d["counts"]
    assert d["wall_s"] == pytest.approx(sum(r["wall_s"] for r in own.values()))
    assert sum(d["categories"].values()) == pytest.approx(d["wall_s"])
    for c, v in d["categories"].items():
        assert v == pytest.approx(sum(r["categories"][c] for r in own.values())), c
    assert d["goodput_pct"] == pytest.approx(100 * d["categories"]["useful_compute"] / d["wall_s"])
    assert d["categories"]["useful_compute"] > 0
    assert d["cost"]["total_usd"] == pytest.approx(sum(r["cost"]["total_usd"] for r in own.values()))
    assert d["cost"]["total_usd"] > 0 and d["cost"]["complete"] and d["cost"]["priced"] == 4
    for e in d["elements"]:
        r = own[e["index"]]
        assert (e["wall_s"], e["cost_usd"], e["state"]) == (pytest.approx(r["wall_s"]),
                                                            pytest.approx(r["cost"]["total_usd"]), r["state"])
    assert [e["final_step"] for e in d["elements"]] == [3, 2, 3, 3]
    assert [e["metric"] for e in d["elements"]] == pytest.approx([b + 1 / (2 if i == 1 else 3)
                                                                  for i, b in enumerate(BASE)])
    assert d["metric"] == {"name": "loss", "mode": "min", "scope": "last", "source": "the sweep's early_stop"}
    assert d["best"]["index"] == 2 and d["best"]["metric"] == pytest.approx(0.1 + 1 / 3)
    assert d["best"]["params"] == {"x": 2} and d["best"]["metric_step"] == 3
    assert d["span"]["elapsed_s"] <= d["wall_s"]

    # another metric, and one nobody reported
    acc = json.loads(cli.run("report", sweep_id, "--json", "--metric", "acc", "--mode", "max").stdout)
    assert acc["best"]["index"] == 1 and acc["best"]["state"] == "GAVE_UP"  # every element with a value is ranked
    none = json.loads(cli.run("report", sweep_id, "--json", "--metric", "ppl", "--mode", "min").stdout)
    assert none["best"] is None and none["best_reason"] == "no element reported ppl (reported: acc, loss)"
    p = cli.run("report", sweep_id, "--metric", "ppl", check=False)
    assert p.returncode == 2 and "--metric ppl needs --mode min or --mode max" in p.stderr, p.stderr

    text = cli.run("report", sweep_id).stdout
    assert f"sweep {sweep_id}: 4 elements: 2 COMPLETED, 1 CANCELLED, 1 GAVE_UP" in text, text
    assert "best element 2 (min loss, its latest report, from the sweep's early_stop): loss 0.433333 at step 3" in text
    assert f"cost ${d['cost']['total_usd']:.4f} (4 of 4 elements priced)" in text, text
