"""``launcher status|cancel|logs SWEEP``: a sweep's elements as the jobs they are recorded as.

A sweep is not a row of its own: its elements are (``launcher.sweep.arrays``,
``launcher.sweep.one_by_one``), each with ``meta.sweep`` = {id, index, size, params, seed,
array}. Status refreshes the open elements in one batched call; cancel sends ONE scancel for
the whole array, then closes each element through the ordinary cancel (which finds it
cancelled, or cancels what is left of it).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Optional

from launcher.core.errors import LauncherError
from launcher.core.status import STOPPED
from launcher.recovery.current import jobs_up_to_date
from launcher.spec.sweep_elements import Element
from launcher.state.rows import job_step
from launcher.state.store import is_open
from launcher.sweep.cancelling import cancel_sweep as cancel
from launcher.sweep.early_stop import until_stop
from launcher.sweep.elements import sweep_rows
from launcher.sweep.judgements import stop_of
from launcher.sweep.one_by_one import fill
from launcher.sweep.reports import latest, read_element_reports
from launcher.sweep.steps import record_open_steps
from launcher.sweep.stopping import early_stop_of
from launcher.sweep.summary import summarize
from launcher.backend.context import AppContext


def is_sweep(app: AppContext, name: str) -> bool:
    return app.store.sweeps.exists(name) if app.has_store() else False


def sweep_status(app: AppContext, sweep_id: str, note=None) -> dict:
    """The summary of ``launcher.sweep.summary`` for SWEEP_ID, its open elements refreshed first
    and every element's reports read (bounded: a root that does not answer shows no metric).
    The element rows are read once; after the refresh, only their states."""
    rows = sweep_rows(app.store, sweep_id)
    if not rows:
        raise LauncherError(f"no sweep '{sweep_id}' (see `launcher status`)")
    results = jobs_up_to_date(app, rows, note or (lambda _line: None))  # as `status` and `report` do
    for job_id, r in results.items():
        if isinstance(r, Exception) and note:
            note(f"{job_id}: status not refreshed: {r}")

    try:
        fill(app, sweep_id)  # elements the launcher queued start as slots free
    except LauncherError as e:
        if note:
            note(f"sweep {sweep_id}: queued elements not started: {e}")
    rows = with_states(rows, app.store.sweeps.element_states(sweep_id))
    rows = record_open_steps(app, rows, note)  # each element's one step, as `status JOB` shows it
    read = read_element_reports({r.meta["sweep"]["index"]: r.ckpt_root for r in rows if r.ckpt_root})
    for i, why in sorted(read.problems.items()):
        if note:
            note(f"element {i}: metrics not read: {why}")
    return summarize(sweep_id, [Element(r.meta["sweep"]["index"], r.meta["sweep"]["params"]) for r in rows],
                     **element_facts(rows, read.reports), metric=_metric_of(rows[0]), attempts=_restarted(app, rows))


def with_states(rows, states: dict) -> list:
    """Pure: ROWS with the (state, handle) STATES read after a refresh (a row not in STATES as it was)."""
    out = []
    for r in rows:
        now = states.get(r.job_id, (r.state, r.handle))
        out.append(r if now == (r.state, r.handle) else replace(r, state=now[0], handle=now[1]))
    return out


def _restarted(app: AppContext, rows) -> dict:
    """{index: [(attempt, state)]} of the elements with more than one attempt (a requeue by the
    scheduler or a resubmission): only those rows cost a read of their attempts."""
    return {r.meta["sweep"]["index"]: [(a.attempt, a.state) for a in app.store.attempts(r.job_id)]
            for r in rows if _attempt_of(r) > 1}


def _attempt_of(row) -> int:
    """The current attempt of ROW, from its handle (1 when it has none)."""
    try:
        return int(json.loads(row.handle or "{}").get("attempt") or 1)
    except (ValueError, TypeError, AttributeError):
        return 1


def element_facts(rows, reports) -> dict:
    """Pure: summarize's STATES, STEPS (each row's one step: ``launcher.state.rows.job_step``),
    METRICS (the latest of each), METRIC_STEPS (the latest step it reported them at: shown beside
    them, never as its step) and STOPPED (the stop of an element STOPPED, being stopped, or whose
    stop's cancel the scheduler reported first) of the element ROWS, given their REPORTS."""
    states, steps, metrics, metric_steps, stopped = {}, {}, {}, {}, {}
    for r in rows:
        i = r.meta["sweep"]["index"]
        j = stop_of(r.meta)
        metric_steps[i], metrics[i] = latest(until_stop(reports.get(i) or {}, j))  # reports after its stop do not count
        states[i] = r.state
        steps[i] = job_step(r)
        if j is not None and (is_open(r) or r.state in (STOPPED, "CANCELLED")):
            stopped[i] = j
    return {"states": states, "steps": steps, "metrics": metrics, "metric_steps": metric_steps, "stopped": stopped}


def _metric_of(row) -> Optional[str]:
    if "early_stop" not in row.spec_yaml:  # no such section: the spec (1,000 values) is not parsed
        return None
    cfg = early_stop_of(row)
    return cfg.metric if cfg else None


def cancel_sweep(app: AppContext, sweep_id: str, element: Optional[int] = None) -> list:
    """Cancel the whole sweep or one element: a CancelReport per element (``launcher.sweep.cancelling``)."""
    return cancel(app, sweep_id, element)
