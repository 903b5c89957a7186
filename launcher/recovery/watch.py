"""``launcher watch``: the recovery loop over every open job.

Each cycle first reconciles job rows left in SUBMITTING (a launch that died between the
scheduler's accept and the state write), then makes one batched status call per target,
hands every attempt that ended to the pure ``decide``, and carries the decision out:
resubmit (after its delay), or close the job with the reason.

Exactly-once under any number of watchers and crashes: the decide -> submit -> record
step for a job runs only while holding the job's claim, taken in the same transaction
that reads the job and its attempts (so the decision sees what other watchers did), and
the attempt is recorded only while the claim is still ours. A watcher that dies
mid-submit leaves an expiring claim; whoever takes it over looks the attempt's dedupe
token up in the scheduler first and adopts what it finds.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from ..backend import Handle
from ..errors import LauncherError
from ..launch import find_submission, job_ref, job_spec, refresh, resubmit
from ..plan.observed import observe_job
from ..state import ClaimLost, is_open
from ..status import JobState, Status
from . import burst, takeover
from .policy import (Budgets, Done, Event, FailureClass, GiveUp, PastFailure, Retry, Superseded, abandoned,
                     classify, decide, reconcile_submitting)
from .progress import read_progress

CLAIM_TTL_S = 120.0  # longer than a submission takes; a crashed holder's claim is taken over after it


def claim_ttl() -> float:
    """$LAUNCHER_CLAIM_TTL seconds, else CLAIM_TTL_S."""
    import os

    try:
        v = float(os.environ.get("LAUNCHER_CLAIM_TTL", "") or CLAIM_TTL_S)
    except ValueError:
        raise LauncherError(f"LAUNCHER_CLAIM_TTL={os.environ['LAUNCHER_CLAIM_TTL']!r}: expected seconds "
                            "(a number)") from None
    return v if v > 0 else CLAIM_TTL_S


@dataclass
class Outcome:
    job_id: str
    action: str  # "running", "resubmitted", "waiting", "done", "gave_up", "superseded", "adopted", "failed",
    #              "claimed" (another watcher holds it), "control_plane"
    reason: str = ""


def open_jobs(store) -> list:
    """Open jobs that reached a scheduler (SUBMITTING rows are reconciled separately)."""
    return [j for j in store.open_jobs() if j.handle]


@contextmanager
def claimed(store, job_id: str, ttl: Optional[float] = None) -> Iterator:
    """The job's claim for the duration of the block (None when another watcher holds it)."""
    c = store.claim(job_id, ttl=ttl or claim_ttl())
    try:
        yield c
    finally:
        if c is not None:
            store.release(job_id, c.owner)


def cycle(app, clock: Callable[[], float] = time.time, hooks=()) -> list[Outcome]:
    store = app.store
    outcomes = reconcile(app, clock)
    jobs = open_jobs(store)
    statuses = refresh(app, jobs)
    for job in jobs:
        st = statuses.get(job.job_id)
        try:
            row = store.get_job(job.job_id)
            if not is_open(row):  # the status just read closed it (COMPLETED, CANCELLED), or another watcher did
                if row.state in ("COMPLETED", "CANCELLED") and isinstance(st, Status) and st.state.value == row.state:
                    outcomes.append(Outcome(job.job_id, "done", row.state.lower()))
                continue
            bursting = burst.step(app, row, job_spec(row), st, clock)
            if bursting is not None:
                outcomes.append(bursting)
                continue
            outcomes.append(_handle(app, row, st, clock))
        except ClaimLost as e:
            outcomes.append(Outcome(job.job_id, "claimed", str(e)))
        except LauncherError as e:
            store.record_event(job.job_id, "watch_error", error=str(e))
            outcomes.append(Outcome(job.job_id, "control_plane", str(e)))
    for hook in hooks:  # e.g. spot burst: sees the same refreshed jobs, same cycle
        outcomes.extend(hook(app, clock) or [])
    return outcomes


# ---- SUBMITTING rows
def submitting_jobs(store) -> list:
    return [j for j in store.open_jobs() if not j.handle and j.state == "SUBMITTING"]


def reconcile(app, clock: Callable[[], float] = time.time, jobs=None, record_errors: bool = True) -> list[Outcome]:
    """Resolve every SUBMITTING row through its dedupe token: adopt the scheduler's job, or
    close the row as FAILED once its grace has passed with no such job."""
    out = []
    for job in submitting_jobs(app.store) if jobs is None else jobs:
        try:
            o = reconcile_one(app, job.job_id, clock)
        except LauncherError as e:
            if record_errors:
                app.store.record_event(job.job_id, "watch_error", error=str(e))
            o = Outcome(job.job_id, "control_plane", str(e))
        if o is not None:
            out.append(o)
    return out


def reconcile_one(app, job_id: str, clock: Callable[[], float] = time.time) -> Optional[Outcome]:
    store = app.store
    with claimed(store, job_id) as c:
        if c is None:
            return Outcome(job_id, "claimed", "another watcher is reconciling it")
        job = c.job
        if job.handle or job.state != "SUBMITTING" or not is_open(job):
            return None  # the launch (or another watcher) recorded it meanwhile
        attempt = int(job.meta.get("attempt", 1))
        found = find_submission(app.backend(job.target), job_ref(app, job, attempt))
        r = reconcile_submitting(found is not None, clock() - job.created)
        if r.action == "wait":
            return Outcome(job_id, "waiting", r.reason)
        if r.action == "adopt":
            store.record_attempt(job_id, attempt, job.target, found.to_json(), found.native_id, state="PENDING",
                                 reason="adopted by its dedupe token", owner=c.owner)
            store.record_event(job_id, "adopted", attempt=attempt, native_id=found.native_id, reason=r.reason)
            return Outcome(job_id, "adopted", f"{job.target} id {found.native_id}")
        store.close_job(job_id, "FAILED", r.reason, owner=c.owner, event="submit_lost", detail={"reason": r.reason})
        return Outcome(job_id, "failed", r.reason)


# ---- one open job
def _handle(app, job, st, clock) -> Outcome:
    store = app.store
    if isinstance(st, Exception) or st is None:
        n = int(job.meta.get("control_plane_errors", 0)) + 1
        store.patch_meta(job.job_id, control_plane_errors=n)
        store.record_event(job.job_id, "control_plane", error=str(st), consecutive=n)
        return Outcome(job.job_id, "control_plane", str(st))
    if job.meta.get("control_plane_errors"):
        store.patch_meta(job.job_id, control_plane_errors=None)
    # spot that learns: every ended attempt (a Slurm requeue in place included) is evidence
    # for the planner's interruption rates, recorded before any resubmission ranks offers
    observe_job(store, job, st)
    if st.state is JobState.UNKNOWN:
        return _unknown(app, job, st, clock)
    if not st.state.is_terminal:
        record_progress(app, job)
        if job.meta.get("unknown_since"):
            store.patch_meta(job.job_id, unknown_since=None)
        return Outcome(job.job_id, "running", st.state.value)
    with claimed(store, job.job_id) as c:
        if c is None:
            return Outcome(job.job_id, "claimed", "another watcher is deciding on it")
        return _decide_and_act(app, c, st, clock)


def _unknown(app, job, st, clock) -> Outcome:
    """The scheduler has no record of the job: a query problem until it lasts LOST_AFTER_S,
    then the job is closed (its outcome cannot be known), never resubmitted blindly."""
    store = app.store
    since = job.meta.get("unknown_since")
    if since is None:
        store.patch_meta(job.job_id, unknown_since=clock())
        store.record_event(job.job_id, "control_plane", error=st.reason or "status unknown")
        return Outcome(job.job_id, "control_plane", st.reason or "status unknown")
    why = abandoned(JobState.UNKNOWN, since, clock())
    if why is None:
        return Outcome(job.job_id, "control_plane", st.reason or "status unknown")
    with claimed(store, job.job_id) as c:
        if c is None or not is_open(c.job):
            return Outcome(job.job_id, "claimed", "another watcher is deciding on it")
        why = f"{why} (last: {st.reason})" if st.reason else why
        store.close_job(job.job_id, "FAILED", f"lost: {why}", owner=c.owner, event="lost", detail={"reason": why})
    return Outcome(job.job_id, "failed", why)


def _decide_and_act(app, c, st: Status, clock) -> Outcome:
    """Under the job's claim, on the job and attempts read when the claim was taken."""
    store = app.store
    job, attempts = c.job, c.attempts
    if not is_open(job):
        return Outcome(job.job_id, "claimed", f"already closed ({job.state})")
    latest = attempts[-1]
    if latest.state not in JobState.__members__ or not JobState(latest.state).is_terminal:
        # another watcher resubmitted since our status query: nothing to decide
        return Outcome(job.job_id, "claimed", f"attempt {latest.attempt} is {latest.state}")
    state = JobState(latest.state)
    reason = latest.reason if latest.state == st.state.value else (latest.reason or st.reason)
    meta = dict(job.meta)
    spec = job_spec(job)
    budgets = Budgets.from_spec(spec)
    progress = read_progress(job.ckpt_root)
    if progress.unknown:  # the root did not answer in time: decide nothing from a guess
        store.record_event(job.job_id, "storage_timeout", error=progress.error)
        return Outcome(job.job_id, "waiting", f"checkpoint root not readable: {progress.error}")
    record_progress(app, job, progress)
    resumes = takeover.resume_steps(job.job_id, [a.attempt for a in attempts], progress.history)
    history = []
    for a, nxt in zip(attempts, attempts[1:]):
        fc = classify(JobState(a.state)) if a.state in JobState.__members__ else None
        if fc is not None:
            history.append(PastFailure(a.attempt, fc, _resume(resumes, a.attempt), _resume(resumes, nxt.attempt)))
    spent = sum(a.cost_usd or 0.0 for a in attempts)
    superseded = ""
    if job.ckpt_root:
        others = [(j.job_id, j.created) for j in store.jobs_sharing_root(job.ckpt_root)]
        superseded = takeover.superseded_by(job.job_id, job.created, progress.history, others)
    event = Event(attempt=latest.attempt, state=state, resume_step=_resume(resumes, latest.attempt),
                  committed_step=progress.committed_step, reason=reason, spent_usd=spent,
                  superseded_by=superseded)
    decision = decide(history, event, budgets, clock())
    stale = abandoned(state, latest.ended, clock()) if isinstance(decision, Retry) else None
    if stale:
        decision = GiveUp(stale, decision.failure)
    if isinstance(decision, Done):
        final = "COMPLETED" if state is JobState.COMPLETED else "CANCELLED"
        store.close_job(job.job_id, final, reason, owner=c.owner, event="done", detail={"reason": decision.reason})
        return Outcome(job.job_id, "done", decision.reason)
    if isinstance(decision, Superseded):
        store.close_job(job.job_id, "SUPERSEDED", decision.reason, owner=c.owner, event="superseded",
                        detail={"reason": decision.reason, "attempt": latest.attempt, "attempt_state": state.value})
        return Outcome(job.job_id, "superseded", decision.reason)
    if isinstance(decision, GiveUp):
        store.close_job(job.job_id, "GAVE_UP", f"gave up: {decision.reason}", owner=c.owner, event="gave_up",
                        detail={"reason": decision.reason,
                                "failure": decision.failure.value if decision.failure else None})
        return Outcome(job.job_id, "gave_up", decision.reason)
    assert isinstance(decision, Retry)
    due = meta.get("retry_at")
    if due is None and decision.delay_s > 0:
        meta["retry_at"] = clock() + decision.delay_s
        store.update_job(job.job_id, meta=meta)
        store.record_event(job.job_id, "retry_scheduled", reason=decision.reason, delay_s=decision.delay_s)
        return Outcome(job.job_id, "waiting", decision.reason)
    if due is not None and clock() < due:
        return Outcome(job.job_id, "waiting", decision.reason)
    target = job.target  # a backend that fails over (ChoosesPlacement) does so within the target
    avoid = _cool_down(meta, st, decision, spec, clock(), Handle.from_json(latest.handle).extra.get("infra"))
    handle = resubmit(app, job, target, latest.attempt + 1, decision.reason, avoid=avoid, owner=c.owner)
    meta.pop("retry_at", None)
    store.update_job(job.job_id, meta=meta, reason=decision.reason)
    return Outcome(job.job_id, "resubmitted", f"{decision.reason} -> {target} id {handle.native_id}")


def _resume(resumes: dict, attempt: int) -> Optional[int]:
    s = resumes.get(attempt)
    return None if s is None or s < 0 else s


def _cool_down(meta: dict, st: Status, decision: Retry, spec, now: float, infra=None) -> list:
    """Placements to keep away from: the region that just preempted the job (or had no
    capacity) is blocked for recovery.placement_cooldown. Updates meta["avoid"]."""
    avoid = {p: until for p, until in (meta.get("avoid") or {}).items() if until > now}
    cloud, region = st.extra.get("cloud"), st.extra.get("region")
    if not (cloud and region) and infra and infra.count("/") >= 1:  # where it was launched
        cloud, region = infra.split("/")[:2]
    if decision.failure in (FailureClass.PREEMPTED, FailureClass.NO_CAPACITY) and cloud and region:
        avoid[f"{cloud}/{region}".lower()] = now + (spec.recovery.placement_cooldown or 0)
    meta["avoid"] = avoid
    return sorted(avoid)


def record_progress(app, job, progress=None) -> None:
    """Copy the checkpoint root's facts into the state store, where `launcher status` shows
    them: the last committed step, and the step each attempt ACTUALLY resumed from (its
    generation's record in GENERATIONS.json, matched by job id and attempt)."""
    if not job.ckpt_root:
        return
    progress = progress or read_progress(job.ckpt_root)
    if progress.error:
        return
    if progress.committed_step is not None and progress.committed_step != job.last_step:
        app.store.update_job(job.job_id, last_step=progress.committed_step)
    attempts = app.store.attempts(job.job_id)
    resumes = takeover.resume_steps(job.job_id, [a.attempt for a in attempts], progress.history)
    for a in attempts:
        if a.attempt in resumes and resumes[a.attempt] != a.resume_step:
            app.store.update_attempt(job.job_id, a.attempt, resume_step=resumes[a.attempt])


def run(app, interval: float = 10.0, once: bool = False, clock=time.time, sleep=time.sleep, echo=print,
        max_cycles: Optional[int] = None, hooks=()) -> None:
    n = 0
    while True:
        for o in cycle(app, clock, hooks):
            if o.action not in ("running", "claimed"):  # claimed: another watcher is on it
                echo(f"{o.job_id}: {o.action}" + (f" ({o.reason})" if o.reason else ""))
        n += 1
        if once or (max_cycles is not None and n >= max_cycles):
            return
        if not app.store.open_jobs():
            echo("no open jobs left")
            return
        sleep(interval)
