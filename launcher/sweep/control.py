"""``launcher status|cancel|logs SWEEP``: a sweep's elements as the jobs they are recorded as.

A sweep is not a row of its own: its elements are (``launcher.sweep.launching``), each with
``meta.sweep`` = {id, index, size, params, seed, array}. Status refreshes the open elements in
one batched call; cancel sends ONE scancel for the whole array, then closes each element
through the ordinary cancel (which finds it cancelled, or cancels what is left of it).
"""

from __future__ import annotations

from typing import Optional

from ..errors import LauncherError
from .expand import Element
from .launching import element_job_id, sweep_rows
from .summary import summarize


def is_sweep(app, name: str) -> bool:
    return bool(sweep_rows(app.store, name)) if (app.home / "state.db").exists() else False


def element_id(app, sweep_id: str, index: int) -> str:
    """The job id of element INDEX of SWEEP_ID, with a clear error when there is none."""
    rows = sweep_rows(app.store, sweep_id)
    if not rows:
        raise LauncherError(f"no sweep '{sweep_id}' (see `launcher status`)")
    size = rows[0].meta["sweep"]["size"]
    if not 0 <= index < size:
        raise LauncherError(f"sweep {sweep_id} has elements 0-{size - 1}; there is no element {index}")
    return element_job_id(sweep_id, index)


def sweep_status(app, sweep_id: str, note=None) -> dict:
    """The summary of ``launcher.sweep.summary`` for SWEEP_ID, its open elements refreshed first."""
    from ..state import is_open
    from ..tracking import refresh

    rows = sweep_rows(app.store, sweep_id)
    if not rows:
        raise LauncherError(f"no sweep '{sweep_id}' (see `launcher status`)")
    results = refresh(app, [r for r in rows if is_open(r)])
    for job_id, r in results.items():
        if isinstance(r, Exception) and note:
            note(f"{job_id}: status not refreshed: {r}")
    rows = sweep_rows(app.store, sweep_id)
    els = [Element(r.meta["sweep"]["index"], r.meta["sweep"]["params"]) for r in rows]
    states = {r.meta["sweep"]["index"]: r.state for r in rows}
    steps = {r.meta["sweep"]["index"]: r.last_step for r in rows}
    return summarize(sweep_id, els, states, steps=steps)


def cancel_sweep(app, sweep_id: str, element: Optional[int] = None) -> list:
    """Cancel the whole sweep or one element: a CancelReport per element (``launcher.sweep.cancelling``)."""
    from .cancelling import cancel_sweep as cancel

    return cancel(app, sweep_id, element)
