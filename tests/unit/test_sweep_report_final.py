"""A finished sweep's report is final (issue 30): `launcher report SWEEP --json` of a sweep whose
elements all ended (completed, stopped early, cancelled before they started) gives the same
figures when it is read again an hour later. Real state store and element roots; the clock is
moved by an hour (time.time and the report's own `now`)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
import yaml

from launcher.api.facade import Launcher
from launcher.checkpoint import open_store
from launcher.checkpoint.attempts import read_attempt, start_generation, write_attempt
from launcher.checkpoint.metrics import encode_report, metrics_key
from launcher.report.sweep_collect import gather_sweep
from launcher.report.sweep_text import format_sweep_report
from launcher.sweep.early_stop import Judgement
from launcher.sweep.elements import element_job_id

HANDLE = json.dumps({"backend": "local", "native_id": "n", "extra": {}})
SWEEP = "fin-1"


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


def _root(root, job_id: str, started: float, reports) -> None:
    """ROOT as an element's run leaves it: generation 1's record (its program started at STARTED)
    and its reports [(step, {metric: value})]."""
    store = open_store(str(root))
    start_generation(store, job_id=job_id, hint=1)
    rec = read_attempt(store, 1)
    rec["started"] = _iso(started)
    write_attempt(store, 1, rec)
    (root / ".launcher" / "metrics").mkdir(parents=True, exist_ok=True)
    (root / metrics_key(1)).write_bytes(b"".join(encode_report(s, m, 1, _iso(started + s)) for s, m in reports))


def _finished_sweep(lx: Launcher, tmp, still_running: bool = False) -> float:
    """Element 0 completed, element 1 was stopped early at rung 10 (it reported once more after its
    stop), element 2 was cancelled while it queued. Returns when the last one ended. STILL_RUNNING:
    element 0 is still running instead (the control: its report must move with the clock)."""
    sweep = {"points": [{"x": i} for i in range(3)],
             "early_stop": {"metric": "loss", "mode": "min", "keep": 0.5, "rungs": [10]}}
    text = yaml.safe_dump({"name": "fin", "run": "true", "checkpoint": {"root": str(tmp / "ck")}, "sweep": sweep,
                           "resources": {"peak_tflops": 1}})
    store, t = lx.app.store, time.time() - 300
    for i, state in enumerate(["COMPLETED", "STOPPED", "CANCELLED"]):
        job = element_job_id(SWEEP, i)
        root = tmp / "ck" / f"element-{i:04d}"
        meta = {"sweep": {"id": SWEEP, "index": i, "size": 3, "params": {"x": i}, "seed": 1}}
        if state == "STOPPED":
            meta["early_stop"] = {"judgements": [Judgement(index=1, rung=10, value=2.0, rank=2, population=2,
                                                           kept=1, stop=True, reason="rung 10: rank 2 of 2").to_json()]}
        store.begin_job(job, "fin", "local", "local", None, text, ckpt_root=str(root), meta=meta)
        store.record_submission(job, 1, "local", HANDLE, f"n-{i}", state="PENDING")
        if state == "CANCELLED":  # never started
            store.update_attempt(job, 1, submitted=t, ended=t + 20, state="CANCELLED")
        else:
            _root(root, job, t + 12, [(5, {"loss": 3.0 - i, "flops": 1e12}), (10, {"loss": 1.0 + i, "flops": 1e12}),
                                      *([(15, {"loss": 0.1, "flops": 1e12})] if state == "STOPPED" else [])])
            running = still_running and state == "COMPLETED"
            store.update_attempt(job, 1, submitted=t, started=t + 10, ended=None if running else t + 40 + 10 * i,
                                 state="RUNNING" if running else "COMPLETED" if state == "COMPLETED" else "CANCELLED")
            store.update_job(job, last_step=10)
            if running:
                continue
        store.close_job(job, state, "early stop" if state == "STOPPED" else "")
    return t + 50


@pytest.mark.parametrize("refresh", [False, True])
def test_a_finished_sweeps_report_gives_the_same_figures_an_hour_later(tmp_path, monkeypatch, refresh):
    with Launcher(home=tmp_path / "home") as lx:
        _finished_sweep(lx, tmp_path)
        first = gather_sweep(lx.app, SWEEP, refresh=refresh)
        first_text = format_sweep_report(first)
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 3600)
        later = gather_sweep(lx.app, SWEEP, refresh=refresh)
        later_now = gather_sweep(lx.app, SWEEP, refresh=refresh, now=real() + 3600)
        via_cli = lx.report_sweep(SWEEP, refresh=refresh).to_json()
    # the figures the issue names, then the whole report
    for key in ("wall_s", "categories", "goodput", "goodput_pct", "mfu", "effective_mfu", "span", "cost", "best",
                "clocks_total"):
        assert later[key] == first[key] == later_now[key], key
    assert first["wall_s"] > 0 and first["mfu"] and first["effective_mfu"] and first["span"]["open"] is False
    assert later == first == later_now
    assert via_cli["wall_s"] == first["wall_s"] and via_cli["effective_mfu"] == first["effective_mfu"]
    assert format_sweep_report(later) == first_text


def test_the_control_a_sweep_with_an_element_still_running_does_move_with_the_clock(tmp_path, monkeypatch):
    """What the test above would catch: an attempt counted as still running grows by the hour."""
    with Launcher(home=tmp_path / "home") as lx:
        _finished_sweep(lx, tmp_path, still_running=True)
        first = gather_sweep(lx.app, SWEEP, refresh=False)
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 3600)
        later = gather_sweep(lx.app, SWEEP, refresh=False)
    assert first["span"]["open"] is True
    assert later["wall_s"] == pytest.approx(first["wall_s"] + 3600, abs=1)
