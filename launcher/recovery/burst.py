"""Spot burst: a job stuck in a scheduler's queue (Slurm's) goes to the cloud, and comes back cheaper.

A job whose spec has ``burst: {after: 30m, to: [aws-spot, ...]}`` and that has been
PENDING in its target's queue (a Slurm target's) for longer than ``after`` gets a copy launched on the best
of the ``to`` targets (ranked by the planner). The two copies race: the first to
*run* wins and the other is cancelled. Both copies share the checkpoint root, so the
generation fencing of the checkpoint contract keeps them from ever both committing.
Every decision is recorded with its reason; ``launcher watch`` carries this out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from launcher.backend.protocols import Handle, Scheduler, can
from launcher.core.errors import LauncherError
from launcher.core.status import JobState
from launcher.launching.launch import resubmit
from launcher.launching.targeting import planned_target
from launcher.recovery.outcome import Outcome
from launcher.recovery.state import BurstRace, RecoveryState
from launcher.state.claims import claimed
from launcher.state.store import ClaimLost
from launcher.backend.context import AppContext


@dataclass(frozen=True)
class BurstDecision:
    go: bool
    reason: str


def should_burst(state: JobState, pending_since: float, now: float, after: Optional[int],
                 predicted_wait: Optional[float] = None) -> BurstDecision:
    """Pure: burst a job that waited (or is predicted to wait) longer than ``after``."""
    if not after:
        return BurstDecision(False, "no burst.after in the spec")
    if state is not JobState.PENDING:
        return BurstDecision(False, f"not pending ({state.value})")
    waited = max(0.0, now - pending_since)
    if waited >= after:
        return BurstDecision(True, f"pending {waited:.0f}s in the queue, past burst.after={after}s")
    if predicted_wait is not None and waited + predicted_wait > after:
        return BurstDecision(True, f"predicted start in {predicted_wait:.0f}s (already waited {waited:.0f}s), "
                                   f"past burst.after={after}s")
    return BurstDecision(False, f"pending {waited:.0f}s of burst.after={after}s")


def step(app: AppContext, job, spec, status, clock):
    """One burst step for one job in a watch cycle. Returns an Outcome, or None when the
    job is not bursting (the normal recovery handling then applies)."""
    rs = RecoveryState.load(job.meta)
    if rs.racing:
        with claimed(app.store, job.job_id) as c:
            if c is None:
                return Outcome(job.job_id, "claimed", "another watcher is running the burst race")
            rs = RecoveryState.load(c.job.meta)  # as of the claim: another watcher may have ended it
            if not rs.racing:
                return Outcome(job.job_id, "claimed", "the burst race was decided by another watcher")
            return _race(app, c.job, rs)
    if rs.burst or not spec.burst.to or not spec.burst.after or isinstance(status, Exception) or status is None:
        return None
    if not can(app.backend(job.target), Scheduler):
        return None  # burst leaves a queue that is too long: only a backend with a queue has one
    latest = app.store.latest_attempt(job.job_id)
    d = should_burst(status.state, latest.submitted, clock(), spec.burst.after,
                     _predicted_wait(app, job, spec, latest))
    if not d.go:
        return None

    to = planned_target(app, spec.model_copy(update={"targets": list(spec.burst.to)})) or spec.burst.to[0]
    with claimed(app.store, job.job_id) as c:
        rs = burst_state(c, job.job_id, latest)
        if isinstance(rs, Outcome):
            return rs
        try:
            handle = resubmit(app, c.job, to, latest.attempt + 1, f"burst: {d.reason}", owner=c.owner)
        except ClaimLost:
            raise
        except LauncherError as e:
            app.store.record_event(job.job_id, "burst_failed", target=to, error=str(e))
            return Outcome(job.job_id, "burst_failed", str(e))
        race = BurstRace("racing", queued_attempt=latest.attempt, queued_target=job.target,
                         queued_handle=latest.handle, copy_attempt=latest.attempt + 1, copy_target=to)
        app.store.save_recovery(job.job_id, replace(rs, burst=race).changes_since(rs))
    app.store.record_event(job.job_id, "burst", reason=d.reason, to=to, native_id=handle.native_id)
    return Outcome(job.job_id, "burst", f"{d.reason} -> {to}")


def burst_state(c, job_id: str, latest):
    """Under claim C (None: another watcher holds it): the job's RecoveryState when this
    watcher may start a burst of its LATEST attempt, else the Outcome saying why not."""
    if c is None:
        return Outcome(job_id, "claimed", "another watcher is deciding on it")
    rs = RecoveryState.load(c.job.meta)
    if rs.burst or c.attempts[-1].attempt != latest.attempt:
        return Outcome(job_id, "claimed", "another watcher acted on it first")
    return rs


def _predicted_wait(app: AppContext, job, spec, latest) -> Optional[float]:
    """Seconds until the target's scheduler expects the job to start (``Scheduler.queue_wait``;
    Slurm: squeue --start / pending work ahead)."""
    try:
        est = app.backend(job.target).queue_wait(spec, exclude_job=latest.native_id)
    except LauncherError:
        return None
    if est is None or est.hours == float("inf"):
        return None if est is None else float("inf")
    return est.hours * 3600.0


def _race(app: AppContext, job, rs: RecoveryState):
    """Both copies exist: the first one running wins; the other is cancelled."""
    store = app.store
    race = rs.burst
    queued_h = Handle.from_json(race.queued_handle)
    attempts = {a.attempt: a for a in store.attempts(job.job_id)}
    copy = attempts.get(race.copy_attempt)
    copy_state = JobState(copy.state) if copy and copy.state in JobState.__members__ else JobState.UNKNOWN
    queued_backend = app.backend(race.queued_target)
    try:
        queued_state = queued_backend.status([queued_h])[0].state
    except LauncherError as e:
        return Outcome(job.job_id, "control_plane", f"burst race: {e}")
    if copy_state in (JobState.RUNNING, JobState.COMPLETED, JobState.COMPLETING):
        queued_backend.cancel(queued_h)
        store.update_attempt(job.job_id, race.queued_attempt, state="CANCELLED",
                             reason=f"burst: the copy on {race.copy_target} runs")
        store.save_recovery(job.job_id, replace(rs, burst=race.won_by(race.copy_target)).changes_since(rs))
        store.record_event(job.job_id, "burst_won", winner=race.copy_target, cancelled=race.queued_target,
                           cancelled_native_id=queued_h.native_id)
        return Outcome(job.job_id, "burst_won", f"{race.copy_target} runs; queued copy {queued_h.native_id} "
                                                f"cancelled")
    if queued_state in (JobState.RUNNING, JobState.COMPLETED, JobState.COMPLETING):
        copy_h = Handle.from_json(copy.handle)
        # point the job at the queued copy first: a concurrent status refresh must never read
        # the cancelled copy as the job's end
        store.save_recovery(job.job_id, replace(rs, burst=race.won_by(race.queued_target)).changes_since(rs), handle=queued_h.to_json(), target=race.queued_target, state=queued_state.value)
        app.backend(copy.target).cancel(copy_h)
        store.update_attempt(job.job_id, race.copy_attempt, state="CANCELLED",
                             reason=f"burst: the queued copy on {race.queued_target} started first")
        store.record_event(job.job_id, "burst_won", winner=race.queued_target, cancelled=copy.target,
                           cancelled_native_id=copy_h.native_id)
        return Outcome(job.job_id, "burst_won", f"queued copy started first; {copy.target} copy cancelled")
    if copy_state.is_terminal and copy_state is not JobState.COMPLETED:
        # the copy failed before it ran: stay in the queue, where the job still waits
        store.save_recovery(job.job_id, replace(rs, burst=race.won_by(race.queued_target)).changes_since(rs), handle=queued_h.to_json(), target=race.queued_target, state=queued_state.value)
        store.record_event(job.job_id, "burst_abandoned", reason=f"the copy ended {copy_state.value}")
        return Outcome(job.job_id, "burst_abandoned", f"the copy ended {copy_state.value}")
    return Outcome(job.job_id, "racing", f"queued {queued_state.value}, {race.copy_target} {copy_state.value}")
