"""``launcher cancel SWEEP [--element N]``: every open element cancelled in a few scheduler
calls, then each closed and reported for what it was.

The open elements are first brought up to date in ONE batched status call, so an element
that had finished (or had been cancelled) before is reported as such and left alone (no
event is written for it). Then, holding every open element's claim: one dedupe lookup for
all of them (``Scheduler.find_many``: the attempt a crashed watcher submitted but never
recorded; another backend looks each up), and one cancel of everything the scheduler has
(``Backend.cancel_many``: on Slurm one ``scancel`` naming the sweep's array, which covers its
tasks, and each element's later attempts). Each element that was cancelled is
closed CANCELLED with one ``cancelled`` event; one whose cancel failed stays open and says
why. ``--element N`` is the ordinary single-job cancel of that element.
"""

from __future__ import annotations

import time
from typing import Optional

from launcher.backend.protocols import Handle, Scheduler, can
from launcher.core.errors import LauncherError
from launcher.launching.submission import find_submission, job_ref
from launcher.launching.tracking import refresh
from launcher.recovery.cancel import (CancelReport, Closing, cancel_job, close_cancelled, finished_report,
                                      mark_cancelled, next_attempt, to_cancel, attempt_label)
from launcher.state.actors import actor
from launcher.state.claims import claim_ttl
from launcher.state.store import is_open
from launcher.sweep.arrays import adopt_array
from launcher.sweep.elements import element_id, runs_arrays, sweep_rows
from launcher.sweep.one_by_one import cancel_queued, cancel_queued_element
from launcher.core.status import JobState
from launcher.backend.context import AppContext

CANCELLED = "CANCELLED"
CLOSING = Closing()  # by the user


def cancel_sweep(app: AppContext, sweep_id: str, element: Optional[int] = None) -> list:
    """Cancel the whole sweep or one ELEMENT: a CancelReport per element."""

    if element is not None:
        job_id = element_id(app, sweep_id, element)
        app.store.check_may_act(app.store.get_job(job_id), "cancel")  # a team's store: one's own only
        return [cancel_queued_element(app, job_id) or cancel_job(app, job_id)]
    rows = sweep_rows(app.store, sweep_id)
    if not rows:
        raise LauncherError(f"no sweep '{sweep_id}' (see `launcher status`)")
    app.store.check_may_act(rows[0], "cancel")  # another person's sweep (a team's store): refused before anything
    try:  # elements a killed launch left SUBMITTING: the array they belong to, by the sweep's token
        if adopt_array(app, sweep_id) is not None:
            rows = sweep_rows(app.store, sweep_id)
    except LauncherError as e:
        raise LauncherError(f"sweep {sweep_id}: its launch did not record the array, and looking the array up "
                            f"by its dedupe token failed ({e}); nothing was cancelled: try again") from None
    queued = cancel_queued(app, sweep_id)  # first, under the sweep's claim: none of them starts meanwhile
    closed_now = {r.job_id for r in queued}
    rows = [r for r in _refreshed(app, sweep_id, rows) if r.job_id not in closed_now]
    done = cancel_rows(app, [r for r in rows if is_open(r)], _array_of(app, rows))
    return queued + [done.get(r.job_id) or finished_report(r) for r in rows]


def _refreshed(app: AppContext, sweep_id: str, rows) -> list:
    """The rows after one batched status call for the open ones (a failing target: as stored;
    the cancel then finds out)."""
    todo = [r for r in rows if is_open(r) and r.handle]
    if todo:
        refresh(app, todo)
        rows = sweep_rows(app.store, sweep_id)
    return rows


def _array_of(app: AppContext, rows):
    """The handle of the sweep's array job (its native id covers every task), or None where
    the elements are jobs of their own."""

    with_handle = [r for r in rows if r.handle]
    if not with_handle or not runs_arrays(app.backend(with_handle[0].target)):
        return None
    h = Handle.from_json(with_handle[0].handle)
    array = rows[0].meta["sweep"].get("array") or h.extra.get("sweep_array")
    return Handle(h.backend, h.target, rows[0].meta["sweep"]["id"], array, 1, dict(h.extra)) if array else None


def cancel_rows(app: AppContext, rows, array=None, wait_claim_s: float = 30.0) -> dict:
    """Cancel open elements ROWS, under their claims, in a few scheduler calls; ARRAY (a
    Handle) stands for every task of the sweep's array. {job id: CancelReport}."""
    store = app.store
    claims, out = _claim_all(store, rows, wait_claim_s)
    try:
        out.update(cancel_claimed_many(app, claims, CLOSING, array))
    finally:
        for j, c in claims.items():
            store.release(j, c.owner)
    return out


def cancel_claimed_many(app: AppContext, claims: dict, closing, array=None, check_active: bool = False) -> dict:
    """Cancel what the scheduler has of every claimed job of CLAIMS ({job id: claim}, held by
    the caller) in a few scheduler calls: one dedupe lookup and one cancel per target (one
    grace period for all where the backend stops many at once), then close each as its
    CLOSING says (a Closing, or {job id: Closing}) in one store transaction. ARRAY: as in
    ``cancel_rows``. CHECK_ACTIVE: one status call per target afterwards, and an attempt the
    scheduler still shows active is listed in its report's ``still_active`` (as
    ``cancel_claimed`` does for one job). {job id: CancelReport}."""
    store = app.store
    reports = {j: CancelReport(j) for j in claims}
    found = _find_all(app, claims, reports)
    todo = {j: to_cancel(app, c, found.get(j)) for j, c in claims.items()}
    handles = [h for t in todo.values() for _, h in t]
    errors = _cancel_all(app, handles, array if claims else None)
    active = _still_active(app, [h for h in handles if (h.target, h.native_id) not in errors]) if check_active else {}
    out, who = {}, actor(store)
    with store.batch():  # one transaction for every job's close
        for j, c in claims.items():
            closes = (closing.get(j) if isinstance(closing, dict) else closing).by(who)  # "cancelled by WHO"
            for n, h in todo[j]:
                err = errors.get((h.target, h.native_id))
                if err:
                    reports[j].errors.append(f"{attempt_label(n, h)}: {err}")
                    continue
                mark_cancelled(app, c, reports[j], n, h, closes)
                if (h.target, h.native_id) in active:
                    reports[j].still_active.append(f"{attempt_label(n, h)}: {active[(h.target, h.native_id)]}")
            out[j] = close_cancelled(app, c, reports[j], todo[j], closes)
    return out


def _still_active(app: AppContext, handles) -> dict:
    """{(target, native id): state} of HANDLES (just cancelled) the scheduler still shows
    active: one status call per target (a target that does not answer: none listed)."""
    by_target: dict = {}
    for h in handles:
        by_target.setdefault(h.target, []).append(h)
    out = {}
    for target, hs in by_target.items():
        try:
            sts = app.backend(target).status(hs)
        except LauncherError:
            continue
        for h, st in zip(hs, sts):
            if st.state.is_active and st.state not in (JobState.COMPLETING, JobState.UNKNOWN):
                out[(target, h.native_id)] = st.state.value
    return out


def _claim_all(store, rows, wait_s: float, poll: float = 0.2) -> tuple[dict, dict]:
    """({job id: claim} of ROWS still open, {job id: CancelReport} of those another launcher
    kept acting on for WAIT_S)."""
    claims, out, left = {}, {}, [r.job_id for r in rows]
    deadline = time.monotonic() + wait_s
    while left:
        for j in list(left):
            c = store.claim(j, ttl=claim_ttl())
            if c is not None:
                left.remove(j)
                if is_open(c.job):
                    claims[j] = c
                else:  # closed by another launcher meanwhile: nothing to do
                    store.release(j, c.owner)
                    out[j] = finished_report(c.job)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(poll)
    for j in left:
        holder = store.claim_holder(j)
        out[j] = CancelReport(j, errors=[f"being acted on by another launcher ({holder[0] if holder else '?'}); "
                                         "not cancelled: try again in a minute"])
    return claims, out


def _find_all(app: AppContext, claims: dict, reports: dict) -> dict:
    """{job id: the job the scheduler has with its next attempt's dedupe token}: one lookup
    per target where the backend finds many at once (``Scheduler.find_many``)."""
    by_target: dict = {}
    for j, c in claims.items():
        by_target.setdefault(c.job.target, []).append((j, job_ref(app, c.job, next_attempt(c))))
    found = {}
    for target, refs in by_target.items():
        backend = app.backend(target)
        try:
            if can(backend, Scheduler):
                got = backend.find_many([r for _, r in refs])
                found.update({j: got[r.dedupe_token] for j, r in refs if r.dedupe_token in got})
                continue
            for j, r in refs:
                h = find_submission(backend, r)
                if h is not None:
                    found[j] = h
        except LauncherError as e:
            for j, r in refs:
                if j not in found:
                    reports[j].errors.append(f"attempt {r.attempt}: could not look its dedupe token up: {e}")
    return found


def _cancel_all(app: AppContext, handles, array=None) -> dict:
    """Cancel HANDLES, and the sweep's ARRAY (whatever the store knows of its tasks: a task
    Slurm requeued in place is cancelled too), which stands for its own tasks (``<array>_<i>``):
    {(target, native id): error} of those whose cancel did not go through."""
    by_target: dict = {array.target: []} if array is not None else {}
    for h in handles:
        by_target.setdefault(h.target, []).append(h)
    errors = {}
    for target, hs in by_target.items():
        backend = app.backend(target)
        covered = [h for h in hs if array is not None and target == array.target
                   and h.native_id.startswith(f"{array.native_id}_")]
        send = ([array] if array is not None and target == array.target else []) + \
            [h for h in hs if h not in covered]
        try:
            errs = backend.cancel_many(send)
        except (LauncherError, OSError) as e:
            errs = {h.native_id: str(e) for h in send}
        if covered and array.native_id in errs:
            errs.update({h.native_id: errs[array.native_id] for h in covered})
        errors.update({(target, i): e for i, e in errs.items()})
    return errors


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
