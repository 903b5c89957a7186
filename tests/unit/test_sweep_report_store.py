"""`Launcher.report_sweep` over a real state store and real element roots (no scheduler:
refresh=False): each element's report and metrics are found, summed and ranked."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from launcher.api.facade import Launcher
from launcher.checkpoint.metrics import encode_report, metrics_key
from launcher.sweep.elements import element_job_id


def _sweep(lx: Launcher, tmp, states, losses, early_stop=True) -> str:
    sweep = {"points": [{"x": i} for i in range(len(states))]}
    if early_stop:
        sweep["early_stop"] = {"metric": "loss", "mode": "min", "rungs": [100]}
    text = yaml.safe_dump({"name": "sw", "run": "true", "checkpoint": {"root": str(tmp / "ck")}, "sweep": sweep})
    store, sweep_id = lx.app.store, "sw-1"
    t = time.time() - 100
    for i, state in enumerate(states):
        job = element_job_id(sweep_id, i)
        root = tmp / "ck" / f"element-{i:04d}"
        meta = {"sweep": {"id": sweep_id, "index": i, "size": len(states), "params": {"x": i}, "seed": 1}}
        store.begin_job(job, "sw", "local", "local", None, text, ckpt_root=str(root), meta=meta)
        store.record_attempt(job, 1, "local", json.dumps({"backend": "local"}), f"{i}", state="RUNNING")
        store.update_attempt(job, 1, submitted=t, started=t + 10, ended=t + 40 + i, state=state)
        store.update_job(job, last_step=8)  # its last committed step, as record_progress stores it
        store.close_job(job, state, "")
        if losses[i] is not None:
            (root / ".launcher" / "metrics").mkdir(parents=True)
            (root / metrics_key(1)).write_bytes(encode_report(5, {"loss": losses[i] + 1}, 1, "2026-01-01T00:00:00Z")
                                                + encode_report(9, {"loss": losses[i]}, 1, "2026-01-01T00:00:01Z"))
    return sweep_id


def test_the_report_sums_what_the_store_and_roots_hold_and_ranks_by_early_stop(tmp_path):
    with Launcher(home=tmp_path / "home") as lx:
        sweep_id = _sweep(lx, tmp_path, ["COMPLETED", "FAILED", "COMPLETED"], [0.5, 0.1, 0.3])
        d = lx.report_sweep(sweep_id, refresh=False).to_json()
        own = [lx.report(element_job_id(sweep_id, i), refresh=False).to_dict() for i in range(3)]
    assert d["size"] == 3 and d["counts"] == {"COMPLETED": 2, "FAILED": 1}
    assert d["wall_s"] == sum(r["wall_s"] for r in own) and d["wall_s"] == sum(d["categories"].values())
    assert [e["metric"] for e in d["elements"]] == [0.5, 0.1, 0.3]
    # each element's one step is its row's (as `launcher status ELEMENT` shows it); the reported step is the metric's
    assert [e["final_step"] for e in d["elements"]] == [8, 8, 8] == [r["last_step"] for r in own]
    assert [e["metric_step"] for e in d["elements"]] == [9, 9, 9]
    assert d["best"]["index"] == 1 and d["metric"]["source"] == "the sweep's early_stop"
    assert d["cost"]["total_usd"] is None and "gpu_hour_usd" in d["cost"]["reason"]


def test_no_metrics_and_no_early_stop_say_so(tmp_path):
    with Launcher(home=tmp_path / "home") as lx:
        sweep_id = _sweep(lx, tmp_path, ["COMPLETED", "COMPLETED"], [None, None], early_stop=False)
        d = lx.report_sweep(sweep_id, refresh=False).to_json()
    assert d["best"] is None and d["metric"] is None
    assert d["best_reason"] == ("no metric to rank by (the sweep has no early_stop): pass --metric NAME --mode "
                                "min|max (no element reported a metric with jobside.report(step, NAME=value))")


@pytest.mark.timeout(200)  # under botocore's 4 x 60 s: a report that waits for the hung root fails here
def test_an_element_whose_root_hangs_is_named_and_the_report_still_comes(tmp_path, monkeypatch):
    # element 1's root is on an S3 endpoint that accepts connections and never answers: without
    # the time bound its reads would block for botocore's 4 tries x 60 s
    from launcher.report.sweep_text import format_sweep_report
    from tests.integration.test_watch_storage_bound import hang_s3

    # 5 s, not 1: the three roots are read side by side, and on a loaded CI machine the local roots'
    # threads waited over 1 s for the CPU while element 1's thread built its boto3 client
    monkeypatch.setenv("LAUNCHER_STORAGE_TIMEOUT", "5")
    with Launcher(home=tmp_path / "home") as lx:
        sweep_id = _sweep(lx, tmp_path, ["COMPLETED", "COMPLETED", "COMPLETED"], [0.5, 0.1, 0.3])
        lx.app.store.update_job(element_job_id(sweep_id, 1), ckpt_root="s3://bucket/ck/element-0001")
        hung = hang_s3(monkeypatch)
        try:
            d = lx.report_sweep(sweep_id, refresh=False).to_json()  # (hung: the test's time-out)
        finally:
            hung.close()
    assert d["metrics_unread"] == [1]
    assert [e["metric"] for e in d["elements"]] == [0.5, None, 0.3]
    assert [e["metrics_read"] for e in d["elements"]] == [True, False, True]
    assert d["best"]["index"] == 2
    assert ("metrics of element 1 could not be read within $LAUNCHER_STORAGE_TIMEOUT: the best element is among "
            "the others only") in d["notes"]
    assert any(n.startswith("element 1: metrics and attempt records not read: no answer from its root within 5s")
               for n in d["notes"]), d["notes"]
    text = format_sweep_report(d)
    row = next(line for line in text.splitlines() if line.split()[:2] == ["1", "COMPLETED"])
    assert " ? " in row, text
