"""Reports an element made after it was stopped do not count (issue 20, §9): a stopped
element is cancelled, but its program may go on reporting until the cancel lands; before the
fix a better value reported then made it the sweep's best element in ``launcher report
SWEEP`` and its metric in ``launcher status SWEEP``. Only reports at steps up to the rung it
was stopped at (what it was judged on) count."""

from __future__ import annotations

import json
import time

import yaml

from launcher.api.facade import Launcher
from launcher.checkpoint.metrics import encode_report, metrics_key
from launcher.sweep.early_stop import Judgement, until_stop
from launcher.sweep.elements import element_job_id


def _sweep(lx, tmp, reports: dict, stopped_at: dict) -> str:
    sweep = {"points": [{"x": i} for i in range(len(reports))],
             "early_stop": {"metric": "loss", "mode": "min", "rungs": [100]}}
    text = yaml.safe_dump({"name": "sw", "run": "true", "checkpoint": {"root": str(tmp / "ck")}, "sweep": sweep})
    store, sweep_id = lx.app.store, "sw-1"
    t = time.time() - 100
    for i, steps in reports.items():
        job = element_job_id(sweep_id, i)
        root = tmp / "ck" / f"element-{i:04d}"
        meta = {"sweep": {"id": sweep_id, "index": i, "size": len(reports), "params": {"x": i}, "seed": 1}}
        store.begin_job(job, "sw", "local", "local", None, text, ckpt_root=str(root), meta=meta)
        store.record_attempt(job, 1, "local", json.dumps({"backend": "local"}), f"{i}", state="RUNNING")
        store.update_attempt(job, 1, submitted=t, started=t + 10, ended=t + 40, state="COMPLETED")
        if i in stopped_at:
            j = Judgement(i, stopped_at[i], steps[stopped_at[i]]["loss"], 3, 3, 2, True, "rung 100: stopped")
            store.patch_meta(job, early_stop={"judgements": [j.to_json()]})
            store.close_job(job, "STOPPED", "early stop")
        else:
            store.close_job(job, "COMPLETED", "")
        (root / ".launcher" / "metrics").mkdir(parents=True)
        (root / metrics_key(1)).write_bytes(b"".join(encode_report(s, m, 1, "2026-01-01T00:00:00Z")
                                                     for s, m in sorted(steps.items())))
    return sweep_id


REPORTS = {0: {100: {"loss": 0.9}, 200: {"loss": 0.01}},  # stopped at rung 100, then kept reporting
           1: {100: {"loss": 0.5}, 200: {"loss": 0.4}},
           2: {100: {"loss": 0.3}, 200: {"loss": 0.2}}}


def test_reports_after_a_stop_do_not_make_the_best_element(tmp_path):
    with Launcher(home=tmp_path / "home") as lx:
        sweep_id = _sweep(lx, tmp_path, REPORTS, {0: 100})
        d = lx.report_sweep(sweep_id, refresh=False).to_json()
    assert d["best"]["index"] == 2, d["best"]
    assert [e["metric"] for e in d["elements"]] == [0.9, 0.4, 0.2]
    assert d["elements"][0]["metric_step"] == 100


def test_the_sweep_status_shows_a_stopped_elements_metric_at_its_stop(tmp_path):
    with Launcher(home=tmp_path / "home") as lx:
        sweep_id = _sweep(lx, tmp_path, REPORTS, {0: 100})
        s = lx.sweep(sweep_id).to_json()
    assert [e["metric"] for e in s["elements"]] == [0.9, 0.4, 0.2]


def test_until_stop_keeps_the_steps_up_to_the_stopping_rung():
    j = Judgement(0, 100, 0.9, 3, 3, 2, True, "")
    assert until_stop({50: {"a": 1}, 100: {"a": 2}, 101: {"a": 3}}, j) == {50: {"a": 1}, 100: {"a": 2}}
    assert until_stop({101: {"a": 3}}, None) == {101: {"a": 3}}
