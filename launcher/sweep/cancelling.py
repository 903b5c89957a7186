"""``launcher cancel SWEEP [--element N]``: one cancel of the whole array, then each element
closed and reported for what it was.

The open elements are first brought up to date in ONE batched status call, so an element
that had finished (or had been cancelled) before is reported as such and left alone (no
event is written for it). Then the array is cancelled in one call, and every element that
was open is closed through the ordinary cancel (``launcher.cancel``), which also cancels
an element's later attempts (an element resubmitted alone is an array of its own). An
element another launcher closed in between (it saw the array's cancel first) was still
cancelled by this command, and is reported so.
"""

from __future__ import annotations

from typing import Optional

from ..errors import LauncherError
from .launching import sweep_rows

CANCELLED = "CANCELLED"


def cancel_sweep(app, sweep_id: str, element: Optional[int] = None) -> list:
    """Cancel the whole sweep (one cancel of its array) or one ELEMENT: a CancelReport per element."""
    from ..cancel import cancel_job, finished_report
    from ..state import is_open
    from .control import element_id

    from .queue import cancel_queued, cancel_queued_element

    if element is not None:
        job_id = element_id(app, sweep_id, element)
        return [cancel_queued_element(app, job_id) or cancel_job(app, job_id)]
    rows = sweep_rows(app.store, sweep_id)
    if not rows:
        raise LauncherError(f"no sweep '{sweep_id}' (see `launcher status`)")
    queued = cancel_queued(app, sweep_id)  # first, under the sweep's claim: none of them starts meanwhile
    closed_now = {r.job_id for r in queued}
    rows = _refreshed(app, sweep_id, rows)
    open_rows = [r for r in rows if is_open(r)]
    array_note = _cancel_array(app, rows, open_rows)
    was_open = {r.job_id for r in open_rows}
    return queued + [_close(app, r, array_note) if r.job_id in was_open else finished_report(r)
                     for r in rows if r.job_id not in closed_now]


def _refreshed(app, sweep_id: str, rows) -> list:
    """The rows after one batched status call for the open ones (a failing target: as stored;
    the per-element cancel then finds out)."""
    from ..state import is_open
    from ..tracking import refresh

    todo = [r for r in rows if is_open(r) and r.handle]
    if todo:
        refresh(app, todo)
        rows = sweep_rows(app.store, sweep_id)
    return rows


def _cancel_array(app, rows, open_rows) -> str:
    """Cancel the sweep's array in one call; what was cancelled ("" when nothing was sent)."""
    from ..backend import Handle

    from .queue import runs_arrays

    with_handle = [r for r in open_rows if r.handle]
    if not with_handle or not runs_arrays(app.backend(with_handle[0].target)):
        return ""  # elements that are jobs of their own: each is cancelled below
    h = Handle.from_json(with_handle[0].handle)
    array = rows[0].meta["sweep"].get("array") or h.extra.get("sweep_array")
    try:
        app.backend(with_handle[0].target).cancel(Handle(h.backend, h.target, rows[0].meta["sweep"]["id"], array,
                                                         1, dict(h.extra)))
    except (LauncherError, OSError):
        return ""  # each element's own cancel below tries again and reports its error
    return f"the sweep's array ({h.backend} id {array})"


def _close(app, row, array_note: str):
    """Close one element that was open before the array's cancel."""
    from ..cancel import CancelReport, cancel_job

    rep = cancel_job(app, row.job_id, refresh_first=False)
    if rep.finished_state == CANCELLED and array_note:
        # closed by another launcher's status refresh after OUR cancel of the array
        return CancelReport(row.job_id, cancelled=[array_note])
    return rep


def cancel_counts(reports) -> dict:
    """{"cancelled", "already_cancelled", "already_finished", "failed"}: how many elements each."""
    out = {"cancelled": 0, "already_cancelled": 0, "already_finished": 0, "failed": 0}
    for r in reports:
        if not r.ok:
            out["failed"] += 1
        elif r.finished is not None:
            out["already_cancelled" if r.finished_state == CANCELLED else "already_finished"] += 1
        else:
            out["cancelled"] += 1
    return out


def summary_line(sweep_id: str, reports) -> str:
    c = cancel_counts(reports)
    parts = [f"{c['cancelled']} cancelled now"]
    if c["already_cancelled"]:
        parts.append(f"{c['already_cancelled']} already cancelled")
    if c["already_finished"]:
        parts.append(f"{c['already_finished']} had already finished")
    if c["failed"]:
        parts.append(f"{c['failed']} NOT cancelled (see above)")
    return f"sweep {sweep_id}: {len(reports)} element(s): " + ", ".join(parts)
