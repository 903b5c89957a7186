"""A sweep's elements' steps, brought up to date before a sweep is shown.

A job's step is one value wherever it is shown: its row's last committed step
(``launcher.state.rows.job_step``). ``launcher status JOB`` reads the job's checkpoint root into
its row first (``launcher.recovery.progress.record_progress``); ``status SWEEP`` and
``report SWEEP`` do the same for every open element this role may write, with the roots read
side by side within the storage time bound (``launcher.sweep.reports.read_element_reports``),
so a hung root leaves its element's stored step as it was (and says so) instead of hanging.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from launcher.recovery.progress import read_progress_now, record_progress
from launcher.state.rows import is_open
from launcher.sweep.reports import read_element_reports
from launcher.backend.context import AppContext


def record_open_steps(app: AppContext, rows: list, note: Optional[Callable[[str], None]] = None) -> list:
    """ROWS (a sweep's element rows) with the steps of the open ones this role may write read
    from their checkpoint roots into the store and into the rows returned (the others as they
    were). NOTE(line) for each root that could not be read."""
    store = app.store
    todo = {r.meta["sweep"]["index"]: r for r in rows if is_open(r) and r.ckpt_root and store.may_act(r)}
    if not todo:
        return rows
    read = read_element_reports({i: r.ckpt_root for i, r in todo.items()}, reader=read_progress_now)
    steps = {}
    for i, progress in sorted(read.reports.items()):
        if progress.error:
            read.problems[i] = progress.error
            continue
        record_progress(app, todo[i], progress)
        if progress.committed_step is not None:
            steps[todo[i].job_id] = progress.committed_step
    for i, why in sorted(read.problems.items()):
        if note:
            note(f"element {i}: step not brought up to date: {why}")
    return [replace(r, last_step=steps[r.job_id]) if r.job_id in steps else r for r in rows]
