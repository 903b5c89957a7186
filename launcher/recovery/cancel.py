"""``launcher cancel``: cancel what the scheduler actually has, and say what happened.

The job's claim is taken first, so no watcher resubmits it meanwhile. What is cancelled
is what the scheduler has: every attempt still active, a SUBMITTING row's job found by
its dedupe token, and an attempt a crashed watcher submitted but never recorded (the
next attempt's token). The job is closed as CANCELLED only when every cancel went
through; a job that had already finished is reported with its state and left alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Optional

from launcher.backend.protocols import Handle
from launcher.core import knobs
from launcher.core.errors import LauncherError
from launcher.core.status import JobState, attempt_ended
from launcher.launching.submission import find_submission, job_ref
from launcher.launching.submit import launch_alive
from launcher.launching.tracking import refresh
from launcher.recovery.policy import reconcile_submitting
from launcher.recovery.progress import record_progress
from launcher.recovery.state import RecoveryState
from launcher.state.actors import actor
from launcher.state.claims import claim_ttl
from launcher.state.schema import OVERTAKEN_KEY
from launcher.state.store import is_open
from launcher.backend.context import AppContext


@dataclass
class CancelReport:
    job_id: str
    finished: Optional[str] = None  # "STATE (reason)" when the job had already finished
    finished_state: Optional[str] = None  # that STATE (CANCELLED: it had been cancelled before)
    cancelled: list = field(default_factory=list)  # "attempt N (backend id X)"
    still_active: list = field(default_factory=list)  # cancelled, but the scheduler still shows it active
    errors: list = field(default_factory=list)  # "attempt N (backend id X): error"
    note: str = ""  # what the scheduler had when there was nothing to cancel

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class Closing:
    """How a cancel that went through closes the job: by whoever ran ``launcher cancel``
    (CANCELLED, "cancelled by alice"), or by sweep early stopping (STOPPED,
    ``launcher.sweep.stopping``)."""

    state: str = "CANCELLED"
    reason: str = ""  # "": "cancelled by WHO", WHO the role or user that cancels (``by``)
    event: str = "cancelled"
    detail: dict = field(default_factory=dict)

    def by(self, who: str) -> "Closing":
        """This closing as WHO's (``launcher.state.actors.actor``: the role on a team's store, so
        a cancel by the watchers' role never reads as its owner's)."""
        if self.reason:
            return self
        return replace(self, reason=f"cancelled by {who}", detail={"by": who, **self.detail})


class CancelFailed(LauncherError):
    """A cancel did not go through: the job stays open. ``report`` says what was cancelled
    and what failed."""

    def __init__(self, report: CancelReport):
        self.report = report
        super().__init__(f"job {report.job_id} is not cancelled (see above); it stays open")


def finished_report(row) -> CancelReport:
    """The report of a job that had finished (or been cancelled) before: nothing is done."""
    return CancelReport(row.job_id, finished=row.state + (f" ({row.reason})" if row.reason else ""),
                        finished_state=row.state)


def cancel_job(app: AppContext, job: str, wait_claim_s: float = 30.0, poll: float = 0.2, refresh_first: bool = True) \
        -> CancelReport:
    """REFRESH_FIRST=False: the caller brought the job up to date (a sweep, in one batched call)."""
    store = app.store
    row = store.get_job(job)
    store.check_may_act(row, "cancel")  # another person's job (a team's store): refused before anything
    if refresh_first and row.handle and is_open(row):
        refresh(app, [row])  # the scheduler may have finished it since the store last looked
        row = store.get_job(row.job_id)
    if not is_open(row):
        return finished_report(row)
    row = wait_for_launch(store, row, poll=poll)
    if not is_open(row):
        return finished_report(row)
    deadline = time.monotonic() + wait_claim_s
    while True:
        c = store.claim(row.job_id, ttl=claim_ttl())
        if c is not None:
            break
        if time.monotonic() > deadline:
            holder = store.claim_holder(row.job_id)
            who = holder[0] if holder else "?"
            raise LauncherError(f"job {row.job_id} is being acted on by another launcher ({who}); nothing was "
                                "cancelled: try again in a minute")
        time.sleep(poll)
    try:
        return cancel_claimed(app, c)
    finally:
        store.release(row.job_id, c.owner)


# meta key of a job closed while its launch was still under way ({"at", "attempt"}): watch looks that
# attempt's dedupe token up and cancels what it finds (``launcher.recovery.watch.settle_overtaken``)
OVERTAKEN = OVERTAKEN_KEY  # the store lists the jobs it marks by an index of its own (state.schema)
LAUNCH_WAIT_S = 60.0  # how long a cancel waits for a launch under way ($LAUNCHER_CANCEL_LAUNCH_WAIT)


def launch_wait_s() -> float:
    """$LAUNCHER_CANCEL_LAUNCH_WAIT seconds, else LAUNCH_WAIT_S."""
    return knobs.number("LAUNCHER_CANCEL_LAUNCH_WAIT", LAUNCH_WAIT_S)


def wait_for_launch(store, row, wait_s: Optional[float] = None, poll: float = 0.2):
    """ROW as it is once the launch that is writing it (SUBMITTING, its launch process alive)
    has recorded its outcome, or WAIT_S passed: a cancel then acts on what the launch
    submitted, never closes a row a live job then appears behind. A launch still under way
    after WAIT_S is overtaken: the job is closed CANCELLED, and the launch cancels what it
    submits when it records it (``StateStore.record_submission``: cancel wins)."""
    deadline = time.monotonic() + (launch_wait_s() if wait_s is None else wait_s)
    while (row.state == "SUBMITTING" and not row.handle and is_open(row)
           and launch_alive(row.meta) and time.monotonic() < deadline):
        time.sleep(poll)
        row = store.get_job(row.job_id)
    return row


def cancel_claimed(app: AppContext, c, closing: Closing = Closing()) -> CancelReport:
    """Cancel what the scheduler has of claimed job C, then close it as CLOSING says."""
    job = c.job
    report = CancelReport(job.job_id)
    if not is_open(job):
        return finished_report(job)
    closing = closing.by(actor(app.store))
    # what the scheduler may have that the store does not: a SUBMITTING row's job, or the
    # attempt a watcher submitted right before it died
    try:
        found = find_submission(app.backend(next_target(c)), job_ref(app, job, next_attempt(c)))
    except LauncherError as e:
        report.errors.append(f"attempt {next_attempt(c)}: could not look its dedupe token up: {e}")
        found = None
    todo = to_cancel(app, c, found)
    for n, h in todo:
        backend = app.backend(h.target)
        try:
            backend.cancel(h)
        except (LauncherError, OSError) as e:
            report.errors.append(f"{attempt_label(n, h)}: {e}")
            continue
        mark_cancelled(app, c, report, n, h, closing)
        try:
            st = backend.status([h])[0]
        except LauncherError:
            continue
        if st.state.is_active and st.state not in (JobState.COMPLETING, JobState.UNKNOWN):
            report.still_active.append(f"{attempt_label(n, h)}: {st.state.value}")
    return close_cancelled(app, c, report, todo, closing)


def next_attempt(c) -> int:
    """The attempt claimed job C would submit next (its dedupe token may be at the scheduler)."""
    return c.attempts[-1].attempt + 1 if c.attempts else RecoveryState.load(c.job.meta).attempt


def next_target(c) -> str:
    """Where claimed job C's next attempt would be: the target of a resubmission of it whose
    outcome was unknown (a burst or a move may have sent it elsewhere), else the job's."""
    unknown = c.job.meta.get("submit_unknown") or {}
    return str(unknown.get("target") or c.job.target) if unknown.get("attempt") == next_attempt(c) else c.job.target


def to_cancel(app: AppContext, c, found: Optional[Handle]) -> list[tuple[int, Handle]]:
    """(attempt, handle) of every attempt of claimed job C still active, plus FOUND (the job
    carrying the next attempt's dedupe token, recorded now as that attempt)."""
    todo = [(a.attempt, Handle.from_json(a.handle)) for a in c.attempts if not attempt_ended(a.state) and a.handle]
    if found is not None:
        n, job = next_attempt(c), c.job
        todo.append((n, found))
        app.store.record_attempt(job.job_id, n, job.target, found.to_json(), found.native_id,
                                 state="PENDING", reason="found by its dedupe token while cancelling", owner=c.owner)
    return todo


def attempt_label(n: int, h: Handle) -> str:
    return f"attempt {n} ({h.backend} id {h.native_id})"


def mark_cancelled(app: AppContext, c, report: CancelReport, n: int, h: Handle, closing: Closing) -> None:
    report.cancelled.append(attempt_label(n, h))
    app.store.update_attempt(c.job.job_id, n, state="CANCELLED", reason=closing.reason)


def unsettled_submission(job, attempt: int, now: Optional[float] = None) -> str:
    """Why a submission of ATTEMPT of JOB, whose dedupe token the scheduler did not show, may
    still appear at the scheduler, or "" when nothing of it can run: a launch still under way may
    yet submit; a launch that ended (or a watcher's resubmission that failed) without knowing
    the scheduler's answer (a controller that stalled and takes the request in later) gets the
    same quiet time as ``watch``'s settling (``policy.reconcile_submitting``) before "nothing
    ran" is concluded."""
    alive = launch_alive(job.meta)
    if alive and job.state == "SUBMITTING":
        return "its launch is still under way: it cancels what it submits as soon as the scheduler answers"
    now = time.time() if now is None else now
    unknown = job.meta.get("submit_unknown") or {}
    if job.state == "SUBMITTING":
        since, over = job.created, bool(unknown) or alive is False
    elif unknown.get("attempt") == attempt:  # a resubmission's outcome was unknown
        since, over = float(unknown["at"]), True
    else:
        return ""
    r = reconcile_submitting(False, now - since, launch_over=over,
                             quiet_s=now - float(unknown.get("at") or job.updated or job.created))
    if r.action != "wait":
        return ""
    return (f"whether attempt {attempt}'s submission went through is not known yet (the scheduler has no job "
            "with its dedupe token so far): watch goes on looking for it, and cancels it if it appears")


def close_cancelled(app: AppContext, c, report: CancelReport, todo: list, closing: Closing) -> CancelReport:
    """Close claimed job C as CLOSING says when every cancel in TODO went through (else record
    the failure: it stays open)."""
    store, job, attempts = app.store, c.job, c.attempts
    n = next_attempt(c)
    # a submission of the next attempt the scheduler may still show (none: it was found, and is in TODO)
    unsettled = "" if any(a == n for a, _ in todo) or report.errors else unsettled_submission(job, n)
    if unsettled:
        report.note = unsettled
        # watch goes on looking that attempt's token up (``watch.settle_overtaken``)
        store.patch_meta(job.job_id, **{OVERTAKEN: {"at": time.time(), "attempt": n, "target": next_target(c)}})
    elif not todo and not report.errors:
        last = attempts[-1] if attempts else None
        if last:
            report.note = f"the scheduler had nothing running for it (attempt {last.attempt} ended {last.state})"
        else:
            report.note = "the scheduler has no job with its dedupe token (the launch never got through)"
    if report.ok:
        store.close_job(job.job_id, closing.state, closing.reason, owner=c.owner, event=closing.event,
                        detail={**closing.detail, "cancelled": report.cancelled, "note": report.note,
                                "still_active": report.still_active})
        # its last progress, read once more: a watch pass reads a running job's only every so often
        record_progress(app, job)
    else:
        store.record_event(job.job_id, "cancel_failed", errors=report.errors, cancelled=report.cancelled)
    return report
