"""Bringing jobs up to date before they are shown: what ``launcher status`` and ``launcher report``
both do first, so a report never shows what status would have corrected (an attempt that ended
while nobody watched counted as still running).

For one job: a SUBMITTING row without a handle is reconciled through its dedupe token, its
status is asked of its backend (open or closed: a closed job's last attempt may still lack its
end), and its checkpoint progress is recorded. For many: the same for the open ones, in one
batched status call per target. Another person's job on a team's store is shown as stored and
never written. What is said on the way goes to SAY, one line each.
"""

from __future__ import annotations

from typing import Callable

from launcher.launching.tracking import refresh
from launcher.recovery.progress import read_progress, record_progress
from launcher.recovery.watch import reconcile
from launcher.state.rows import is_open
from launcher.backend.context import AppContext

Say = Callable[[str], None]


def job_up_to_date(app: AppContext, row, say: Say):
    """ROW (a JobRow) brought up to date and read back."""
    store = app.store
    if not store.may_act(row):  # another person's job on a team's store: shown as stored, never written
        return row
    if row.state == "SUBMITTING" and not row.handle:
        for line in reconcile_lines(reconcile(app, jobs=[row], record_errors=False)):
            say(line)
        row = store.get_job(row.job_id)
    if row.handle:
        st = refresh(app, [row]).get(row.job_id)
        if isinstance(st, Exception):
            say(f"warning: could not refresh status: {st}")
    if row.ckpt_root:
        prog = read_progress(row.ckpt_root)
        if prog.error:
            say(f"warning: cannot read checkpoints under {row.ckpt_root}: {prog.error}")
        else:
            record_progress(app, row, prog)
    return store.get_job(row.job_id)


def jobs_up_to_date(app: AppContext, rows, say: Say) -> dict:
    """The open ones of ROWS (this person's) brought up to date: SUBMITTING rows reconciled, the
    others' status asked in one call per target. {job id: Status or the error}, of those asked;
    read the rows again when it is not empty."""
    mine = [r for r in rows if app.store.may_act(r)]
    limbo = [r for r in mine if r.state == "SUBMITTING" and not r.handle and is_open(r)]
    if limbo:
        for line in reconcile_lines(reconcile(app, jobs=limbo, record_errors=False)):
            say(line)
    active = [r for r in mine if r.handle and is_open(r)]
    out = refresh(app, active) if active else {}
    return {**{r.job_id: None for r in limbo}, **out}


def reconcile_lines(outcomes) -> list[str]:
    """What reconciling SUBMITTING rows did, one line per job that changed or failed."""
    out = []
    for o in outcomes:
        if o.action == "adopted":
            out.append(f"{o.job_id}: adopted the submission found by its dedupe token ({o.reason})")
        elif o.action == "failed":
            out.append(f"{o.job_id}: submission lost ({o.reason})")
        elif o.action == "control_plane":
            out.append(f"warning: {o.job_id} is still SUBMITTING: {o.reason}")
    return out
