"""Burst per element: an element still pending in its array past ``burst.after`` is taken out
of the array and launched as a job of its own on the best ``burst.to`` target.

A single job's burst races two copies (``launcher.recovery.burst``). An element of an array
does not: its task is cancelled first (``<array id>_<index>``: that task only, the others
stay in the array and keep its ``max_parallel``), then the element is submitted on the burst
target as a single job (its own env, seed and checkpoint root: ``launcher.sweep.one_by_one``), so
it has one live copy. Should its task have started in between, it is ended and the element
resumes from its own latest commit on the burst target: the checkpoint root's generation
fencing keeps it single-writer.

All of it happens under the element's claim. The state saved before the cancel (the burst
in phase "racing", naming both attempts) keeps a concurrent status refresh from closing the
element on its cancelled task, and lets whoever takes the claim over after a crash finish
the move (the cancel is idempotent; the submission is found by its dedupe token).
Every step is an event: ``burst`` (the decision), ``burst_moved`` or ``burst_failed``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from launcher.backend.protocols import Handle, Scheduler, can
from launcher.core.errors import LauncherError
from launcher.core.status import Status
from launcher.launching.launch import resubmit
from launcher.launching.targeting import planned_target
from launcher.recovery.burst import burst_state, should_burst
from launcher.recovery.outcome import Outcome
from launcher.recovery.state import BurstRace, RecoveryState
from launcher.state.claims import claimed
from launcher.state.store import ClaimLost
from launcher.sweep.elements import runs_arrays
from launcher.backend.context import AppContext


def applies(app: AppContext, job) -> bool:
    """The element runs in an array (its own burst rules apply); else the single-job burst does."""
    return bool(job.meta.get("sweep")) and runs_arrays(app.backend(job.target))


def step(app: AppContext, job, spec, status, clock) -> Optional[Outcome]:
    """One watch cycle's burst step for an element of an array: an Outcome, or None when the
    element is not bursting (the ordinary recovery handles it)."""
    rs = RecoveryState.load(job.meta)
    if rs.racing:  # a move that a crashed watcher began: finish it
        with claimed(app.store, job.job_id) as c:
            if c is None:
                return Outcome(job.job_id, "claimed", "another watcher is moving it")
            rs = RecoveryState.load(c.job.meta)
            return _move(app, c, rs) if rs.racing else Outcome(job.job_id, "claimed", "moved meanwhile")
    if rs.burst or not spec.burst.to or not spec.burst.after or not isinstance(status, Status):
        return None
    if not can(app.backend(job.target), Scheduler):
        return None
    latest = app.store.latest_attempt(job.job_id)
    d = should_burst(status.state, latest.submitted, clock(), spec.burst.after)
    if not d.go:
        return None

    to = planned_target(app, spec.model_copy(update={"targets": list(spec.burst.to), "sweep": None})) \
        or spec.burst.to[0]
    with claimed(app.store, job.job_id) as c:
        rs = burst_state(c, job.job_id, latest)
        if isinstance(rs, Outcome):
            return rs
        race = BurstRace("racing", queued_attempt=latest.attempt, queued_target=job.target,
                         queued_handle=latest.handle, copy_attempt=latest.attempt + 1, copy_target=to)
        app.store.save_recovery(job.job_id, replace(rs, burst=race).changes_since(rs))
        app.store.record_event(job.job_id, "burst", reason=d.reason, to=to, native_id=latest.native_id,
                               how="taken out of the array")
        return _move(app, c, replace(rs, burst=race))


def _move(app: AppContext, c, rs: RecoveryState) -> Outcome:
    """Under the element's claim C: cancel its array task, submit it on the burst target."""
    store, job, race = app.store, c.job, rs.burst
    task = Handle.from_json(race.queued_handle)
    try:
        app.backend(race.queued_target).cancel(task)  # that task only: the rest stay in the array
    except LauncherError as e:
        store.record_event(job.job_id, "burst_failed", target=race.copy_target,
                           error=f"cancel of {task.native_id}: {e}")
        return Outcome(job.job_id, "burst_failed", str(e))
    store.update_attempt(job.job_id, race.queued_attempt, state="CANCELLED",
                         reason=f"burst: taken out of the array for {race.copy_target}")
    try:
        handle = resubmit(app, job, race.copy_target, race.copy_attempt,
                          f"burst: taken out of array task {task.native_id}", owner=c.owner)
    except ClaimLost:
        raise
    except LauncherError as e:  # stays "racing": the next cycle tries the submission again
        store.record_event(job.job_id, "burst_failed", target=race.copy_target, error=str(e))
        return Outcome(job.job_id, "burst_failed", str(e))
    store.save_recovery(job.job_id, replace(rs, burst=race.won_by(race.copy_target)).changes_since(rs))
    store.record_event(job.job_id, "burst_moved", to=race.copy_target, cancelled_native_id=task.native_id,
                       native_id=handle.native_id)
    return Outcome(job.job_id, "burst", f"array task {task.native_id} -> {race.copy_target} id {handle.native_id}")
