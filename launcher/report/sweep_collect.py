"""Gathering ``launcher report SWEEP``: every element's report and metrics, then the sums
of ``launcher.report.sweep``.

The open elements are brought up to date in ONE batched status call; each element's
report then reads the state store, its checkpoint root's attempt records and, for sweeps
up to ``HISTORY_MAX`` elements, the scheduler's per-run records of that element (one call
each: a larger sweep's run times come from the state store, and the report says so).
Each element's root (its attempt records and the metrics it reported,
``launcher.checkpoint.metrics``) is read on a worker thread against one deadline
(``launcher.sweep.reports.read_element_reports``, $LAUNCHER_STORAGE_TIMEOUT as in
``launcher watch``): a hung NFS mount or S3 endpoint under one element leaves that element
unranked, and the report names it, instead of hanging.
"""

from __future__ import annotations

from typing import Optional

from launcher.core.errors import LauncherError
from launcher.recovery.current import jobs_up_to_date
from launcher.report.collect import _stored_spec
from launcher.report.listing import compute_from, read_root
from launcher.report.sweep import ElementIn, aggregate, choose_metric
from launcher.state.rows import job_step
from launcher.sweep.early_stop import until_stop
from launcher.sweep.elements import sweep_rows
from launcher.sweep.judgements import stop_of
from launcher.sweep.reports import read_element_reports
from launcher.sweep.steps import record_open_steps
from launcher.backend.context import AppContext

HISTORY_MAX = 100  # elements; beyond this, no per-element scheduler history calls


def gather_sweep(app: AppContext, sweep_id: str, metric: Optional[str] = None, mode: Optional[str] = None,
                 scope: str = "last", refresh: bool = True, now: Optional[float] = None) -> dict:
    """The sweep report of SWEEP_ID (the JSON shape of ``launcher.report.sweep.aggregate``)."""
    rows = sweep_rows(app.store, sweep_id)
    if not rows:
        raise LauncherError(f"no sweep '{sweep_id}' (see `launcher status`)")
    notes: list = []
    specs: dict = {}  # the elements share one spec: parsed once
    choice = choose_metric(metric, mode, _early_stop(rows[0], specs), scope)  # usage errors before any I/O
    if refresh:
        _refresh_open(app, rows, notes)
        record_open_steps(app, sweep_rows(app.store, sweep_id), notes.append)  # each element's one step
        rows = sweep_rows(app.store, sweep_id)
    history = refresh and len(rows) <= HISTORY_MAX
    if refresh and not history:
        notes.append(f"{len(rows)} elements: run times are the state store's (the scheduler's per-run records are "
                     f"read for sweeps of up to {HISTORY_MAX} elements)")
    roots = _read_roots(rows)
    elements = [_element(app, r, history, now, specs, roots) for r in rows]
    return aggregate(sweep_id, elements, choice, notes=notes)


def _read_roots(rows):
    """Every element root's records and metrics, read within the storage time bound (a
    ``launcher.sweep.reports.Read`` by element index)."""
    jobs = {r.ckpt_root: r.job_id for r in rows if r.ckpt_root}
    roots = {r.meta["sweep"]["index"]: r.ckpt_root for r in rows if r.ckpt_root}
    return read_element_reports(roots, reader=lambda root: read_root(root, jobs[root]))


def _early_stop(row, specs: dict):
    spec = _stored_spec(row, [], specs)  # a spec that does not parse: each element's report says so
    return spec.sweep.early_stop if spec is not None and spec.sweep is not None else None


def _refresh_open(app: AppContext, rows, notes: list) -> None:
    try:
        results = jobs_up_to_date(app, rows, notes.append)  # as `launcher status SWEEP` does
    except Exception as e:  # noqa: BLE001 - report from what is stored
        notes.append(f"could not refresh the elements' status: {e}")
        return
    failed = sorted(str(r) for r in results.values() if isinstance(r, Exception))
    if failed:
        notes.append(f"status of {len(failed)} element(s) not refreshed: {failed[0]}")


def _element(app: AppContext, row, history: bool, now: Optional[float], specs: dict, roots) -> ElementIn:
    sw = row.meta["sweep"]
    got = roots.reports.get(sw["index"]) or {}
    unread = roots.problems.get(sw["index"])
    notes: list = list(got.get("notes") or [])
    if unread:
        notes.append(f"metrics and attempt records not read: {unread}")
    report = None
    try:
        records = got.get("records") if not unread and row.ckpt_root else ([] if unread else None)
        acc, compute, more = compute_from(app, row, records, got.get("metrics") or {}, specs, history, now)
        notes += more
        report = acc.to_dict()
        report["compute"] = compute
    except (LauncherError, OSError, ValueError) as e:
        notes.append(f"no report: {e}")

    metrics = until_stop(got.get("metrics") or {}, stop_of(row.meta))  # reports after its stop do not count
    return ElementIn(index=sw["index"], params=sw.get("params") or {}, state=row.state, job_id=row.job_id,
                     reason=row.reason, report=report, metrics=metrics, last_step=job_step(row),
                     notes=[_generic(n, row) for n in notes], metrics_read=not unread)


def _generic(note: str, row) -> str:
    """A note with the element's own names taken out, so equal notes of many elements group."""
    if row.ckpt_root:
        note = note.replace(row.ckpt_root, "its root")
    return note.replace(row.job_id, "the element")
