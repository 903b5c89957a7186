"""``launcher watch``: the recovery loop over every open job.

Each cycle makes one batched status call per target, hands every attempt that
ended to the pure ``decide``, and carries the decision out: resubmit (after its
delay), or close the job with the reason. The loop keeps no state of its own
beyond the state store, so it can be stopped and started again at any time; a
resubmission looks its dedupe token up first, so a watch killed mid-submit never
submits a job twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from ..backend import Handle
from ..errors import LauncherError
from ..launch import job_spec, refresh, resubmit
from ..status import JobState, Status
from . import burst
from .policy import Budgets, Done, Event, FailureClass, GiveUp, PastFailure, Retry, classify, decide
from .progress import read_progress


@dataclass
class Outcome:
    job_id: str
    action: str  # "running", "resubmitted", "waiting", "done", "gave_up", "control_plane"
    reason: str = ""


def open_jobs(store) -> list:
    return [j for j in store.list_jobs(limit=100000) if not j.meta.get("final") and j.handle]


def cycle(app, clock: Callable[[], float] = time.time, hooks=()) -> list[Outcome]:
    store = app.store
    jobs = open_jobs(store)
    statuses = refresh(app, jobs)
    outcomes = []
    for job in jobs:
        st = statuses.get(job.job_id)
        try:
            row = store.get_job(job.job_id)
            bursting = burst.step(app, row, job_spec(row), st, clock)
            if bursting is not None:
                outcomes.append(bursting)
                continue
            outcomes.append(_handle(app, row, st, clock))
        except LauncherError as e:
            store.record_event(job.job_id, "watch_error", error=str(e))
            outcomes.append(Outcome(job.job_id, "control_plane", str(e)))
    for hook in hooks:  # e.g. spot burst: sees the same refreshed jobs, same cycle
        outcomes.extend(hook(app, clock) or [])
    return outcomes


def _handle(app, job, st, clock) -> Outcome:
    store = app.store
    meta = dict(job.meta)
    if isinstance(st, Exception) or st is None:
        n = int(meta.get("control_plane_errors", 0)) + 1
        meta["control_plane_errors"] = n
        store.update_job(job.job_id, meta=meta)
        store.record_event(job.job_id, "control_plane", error=str(st), consecutive=n)
        return Outcome(job.job_id, "control_plane", str(st))
    if meta.get("control_plane_errors"):
        meta["control_plane_errors"] = 0
        store.update_job(job.job_id, meta=meta)
    if not st.state.is_terminal and st.state is not JobState.UNKNOWN:
        record_progress(app, job)
        return Outcome(job.job_id, "running", st.state.value)
    spec = job_spec(job)
    budgets = Budgets.from_spec(spec)
    attempts = store.attempts(job.job_id)
    progress = read_progress(job.ckpt_root)
    latest = attempts[-1]
    history = []
    for a, nxt in zip(attempts, attempts[1:]):
        fc = classify(JobState(a.state)) if a.state in JobState.__members__ else None
        if fc is not None:
            history.append(PastFailure(a.attempt, fc, progress.resume_of(a.attempt), progress.resume_of(nxt.attempt)))
    spent = sum(a.cost_usd or 0.0 for a in attempts)
    event = Event(attempt=latest.attempt, state=st.state, resume_step=progress.resume_of(latest.attempt),
                  committed_step=progress.committed_step, reason=st.reason, spent_usd=spent)
    decision = decide(history, event, budgets, clock())
    record_progress(app, job, progress)
    if isinstance(decision, Done):
        meta["final"] = True
        store.update_job(job.job_id, meta=meta, state=st.state.value, reason=st.reason)
        store.record_event(job.job_id, "done", reason=decision.reason)
        return Outcome(job.job_id, "done", decision.reason)
    if isinstance(decision, GiveUp):
        meta["final"] = True
        store.update_job(job.job_id, meta=meta, state=st.state.value, reason=f"gave up: {decision.reason}")
        store.record_event(job.job_id, "gave_up", reason=decision.reason,
                           failure=decision.failure.value if decision.failure else None)
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
    target = _next_target(app, job, spec, decision)
    avoid = _cool_down(meta, st, decision, spec, clock(), Handle.from_json(latest.handle).extra.get("infra"))
    handle = resubmit(app, job, target, latest.attempt + 1, decision.reason, avoid=avoid)
    meta.pop("retry_at", None)
    store.update_job(job.job_id, meta=meta, state="PENDING", reason=decision.reason)
    return Outcome(job.job_id, "resubmitted", f"{decision.reason} -> {target} id {handle.native_id}")


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


def _next_target(app, job, spec, decision: Retry) -> str:
    """The same target by default; a backend may name a better one (cloud candidates)."""
    backend = app.backend(job.target)
    chooser = getattr(backend, "next_target", None)
    if chooser is not None:
        return chooser(job, spec, decision) or job.target
    return job.target


def record_progress(app, job, progress=None) -> None:
    """Copy the checkpoint root's facts (last committed step, each attempt's resume step)
    into the state store, where `launcher status` shows them."""
    if not job.ckpt_root:
        return
    progress = progress or read_progress(job.ckpt_root)
    if progress.committed_step is not None and progress.committed_step != job.last_step:
        app.store.update_job(job.job_id, last_step=progress.committed_step)
    for a in app.store.attempts(job.job_id):
        r = progress.resume_of(a.attempt)
        if a.attempt in progress.resume_steps and r != a.resume_step:
            app.store.update_attempt(job.job_id, a.attempt, resume_step=-1 if r is None else r)


def run(app, interval: float = 10.0, once: bool = False, clock=time.time, sleep=time.sleep, echo=print,
        max_cycles: Optional[int] = None, hooks=()) -> None:
    n = 0
    while True:
        for o in cycle(app, clock, hooks):
            if o.action != "running":
                echo(f"{o.job_id}: {o.action}" + (f" ({o.reason})" if o.reason else ""))
        n += 1
        if once or (max_cycles is not None and n >= max_cycles):
            return
        if not open_jobs(app.store):
            echo("no open jobs left")
            return
        sleep(interval)
