"""MFU on `launcher serve`'s jobs list and sweep page (issue 30): each job's figure is the one
its own report (and its job page) gives, "-" where it is not known, with the reason as a
tooltip. Real state stores and checkpoint roots, read through ReadView; the HTML from the
page functions (no server)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from launcher.api.readview import ReadView
from launcher.checkpoint import open_store
from launcher.checkpoint.attempts import read_attempt, start_generation, write_attempt
from launcher.checkpoint.metrics import encode_report, metrics_key
from launcher.serve.pages import JOB_COLUMNS, jobs_page, sweep_page
from launcher.state.store import StateStore

SPEC = "name: m\nrun: 'true'\nresources: {accelerator: H100, gpus_per_node: 8}\n"
HANDLE = json.dumps({"backend": "local", "native_id": "n", "extra": {}})


def _root(root, job_id: str, flops) -> None:
    """ROOT as a job's run leaves it: generation 1's record (its program started 90 s ago) and,
    with FLOPS, the model FLOPs it reported at steps 10 and 20."""
    store = open_store(str(root))
    start_generation(store, job_id=job_id, hint=1)
    rec = read_attempt(store, 1)
    rec["started"] = datetime.fromtimestamp(time.time() - 90, timezone.utc).isoformat()
    write_attempt(store, 1, rec)
    if flops is not None:
        (root / ".launcher" / "metrics").mkdir(parents=True, exist_ok=True)
        (root / metrics_key(1)).write_bytes(b"".join(encode_report(s, {"flops": flops}, 1, "2026-01-01T00:00:00Z")
                                                     for s in (10, 20)))


def _job(s: StateStore, tmp, job_id: str, flops=None, spec=SPEC, state="COMPLETED", meta=None) -> None:
    root = tmp / "ck" / job_id
    _root(root, job_id, flops)
    s.begin_job(job_id, "m", "local", "local", None, spec, ckpt_root=str(root), meta=meta)
    s.record_submission(job_id, 1, "local", HANDLE, f"n-{job_id}", state=state)
    now = time.time()
    s.update_attempt(job_id, 1, submitted=now - 120, started=now - 100, ended=None if state == "RUNNING" else now - 1)
    if state != "RUNNING":
        s.close_job(job_id, state, "")


def _row(html: str, job_id: str) -> str:
    return html.split(f'data-job="{job_id}"')[1].split("</tr>")[0]


def test_the_jobs_list_shows_each_jobs_mfu_as_its_page_does_and_a_dash_where_unknown(tmp_path):
    home = tmp_path / "home"
    s = StateStore(home)
    _job(s, tmp_path, "known", flops=1e15)
    _job(s, tmp_path, "no-flops")  # reported nothing
    _job(s, tmp_path, "no-peak", flops=1e15, spec="name: m\nrun: 'true'\nresources: {accelerator: B300X}\n")
    s.close()
    with ReadView(home=home) as view:
        d = view.jobs()
        page = {j: view.job(j)["report"]["compute"] for j in ("known", "no-flops", "no-peak")}
    listed = {j["job_id"]: j for j in d["jobs"]}
    assert listed["known"]["mfu"] == pytest.approx(page["known"]["mfu"]) and 0 < listed["known"]["mfu"] < 1
    assert listed["known"]["effective_mfu"] == pytest.approx(page["known"]["effective_mfu"])
    assert listed["no-flops"]["mfu"] is None and listed["no-flops"]["mfu_reason"] == page["no-flops"]["reason"]
    assert listed["no-peak"]["mfu"] is None and "peak unknown: B300X" in listed["no-peak"]["mfu_reason"]
    html = jobs_page(d)
    assert "<th>MFU</th>" in html
    assert f'<td class="num mfu">{100 * page["known"]["mfu"]:.1f}%</td>' in _row(html, "known")
    assert '<td class="num mfu" title="peak unknown: B300X' in _row(html, "no-peak")
    assert ">-</td>" in _row(html, "no-flops").split('class="num mfu"')[1][:200]
    assert all(_row(html, j).count("<td") == len(JOB_COLUMNS) for j in listed)


def test_an_ended_jobs_mfu_is_kept_an_open_jobs_is_read_again(tmp_path):
    home = tmp_path / "home"
    s = StateStore(home)
    _job(s, tmp_path, "ended", flops=1e15)
    _job(s, tmp_path, "open", flops=1e15, state="RUNNING")
    s.close()
    with ReadView(home=home) as view:
        first = {j["job_id"]: j["mfu"] for j in view.jobs()["jobs"]}
        assert first["ended"] is not None and first["open"] is not None
        for j in ("ended", "open"):  # the roots' reports gone: only a job read again notices
            (tmp_path / "ck" / j / metrics_key(1)).unlink()
        again = {j["job_id"]: (j["mfu"], j["mfu_reason"]) for j in view.jobs()["jobs"]}
    assert again["ended"] == (first["ended"], None)  # its report is final: not read again
    assert again["open"][0] is None and "no model FLOPs reported" in again["open"][1]


def test_the_sweep_page_has_an_mfu_column_and_the_sweeps_mfu(tmp_path):
    home = tmp_path / "home"
    s = StateStore(home)
    for i, flops in enumerate((1e15, None)):
        meta = {"sweep": {"id": "sw-1", "index": i, "size": 2, "params": {"x": i}, "seed": 1}}
        _job(s, tmp_path, f"sw-1-e{i}", flops=flops, meta=meta)
    s.close()
    with ReadView(home=home) as view:
        d = view.sweep("sw-1")
        own = view.job("sw-1-e0")["report"]["compute"]["mfu"]
    els = {e["index"]: e for e in d["elements"]}
    assert els[0]["mfu"] == pytest.approx(own) and els[1]["mfu"] is None
    assert "no model FLOPs reported" in els[1]["mfu_reason"]
    html = sweep_page(d)
    table = html.split('<table id="elements">')[1]
    head = table.split("</thead>")[0]
    assert head.index("<th>step</th>") < head.index("<th>MFU</th>")
    first, second = table.split('<tr data-index="0"')[1], table.split('<tr data-index="1"')[1]
    assert f'<td class="num mfu">{100 * own:.1f}%</td>' in first.split("</tr>")[0]
    assert '<td class="num mfu" title="no model FLOPs reported' in second.split("</tr>")[0]
    # the sweep's own MFU (its elements' kept FLOPs over their peak-seconds), against its named peak
    assert f'<b id="mfu-pct">{100 * d["mfu"]:.1f}%</b> of dense BF16 peak, H100 SXM' in html


def test_a_sweeps_mfu_against_different_peaks_says_mixed_peaks():
    from launcher.serve.pages import _compute

    c = {"mfu": 0.3, "effective_mfu": 0.15, "useful_share": 0.5, "peak_text": None, "mixed_peaks": True}
    assert "of mixed peaks;" in _compute(c)
    assert "mixed" not in _compute({**c, "mixed_peaks": False, "peak_text": "P"}) and " of P;" in _compute(
        {**c, "mixed_peaks": False, "peak_text": "P"})
