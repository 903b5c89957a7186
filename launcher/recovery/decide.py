"""What one watch cycle does for one open job, decided without I/O.

``on_status`` reads a fresh status against the job's recovery state and the clock, before
any claim is taken; an attempt that ended is decided again under the job's claim
(``UnderClaim``) by ``on_ended``, from the rows read with the claim and the facts gathered
then (``Facts``).
Both return an action that ``launcher.recovery.watch`` carries out: ``Note`` (record what
was learned), ``Close`` (a final state) or ``Resubmit`` (the next attempt).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Union

from launcher.backend.protocols import Handle
from launcher.core.status import GAVE_UP, SUPERSEDED, JobState, attempt_ended
from launcher.recovery import takeover
from launcher.state.store import is_open
from launcher.recovery.policy import (Budgets, Done, Event, FailureClass, GiveUp, PastFailure, Retry, Stop, Superseded,
                                     abandoned, classify, decide)
from launcher.recovery.progress import Progress
from launcher.recovery.hangs import HANG_META
from launcher.recovery.state import RecoveryState


@dataclass(frozen=True)
class Note:
    """Nothing to submit or close: keep STATE, record EVENT (a kind and its detail), report."""

    action: str  # the Outcome's action ("running", "waiting", "control_plane", "claimed")
    reason: str = ""
    state: Optional[RecoveryState] = None  # the recovery state to keep (None: as it was)
    event: Optional[tuple] = None  # (kind, detail)
    progress: bool = False  # copy the checkpoint root's progress into the store


@dataclass(frozen=True)
class Close:
    """Close the job in a final state (under its claim)."""

    state: str
    reason: str  # the job's reason
    event: str
    detail: dict
    action: str  # the Outcome's action and reason
    why: str


@dataclass(frozen=True)
class Resubmit:
    """Submit the next attempt of SPEC (under the job's claim), then keep STATE."""

    attempt: int
    decision: Retry
    state: RecoveryState
    avoid: tuple  # placements to keep away from
    spec: object


@dataclass(frozen=True)
class UnderClaim:
    """Keep STATE now, then take the job's claim: close a LOST job as it says, or else decide
    on the attempt that ended (``on_ended``)."""

    state: RecoveryState
    lost: Optional[Close] = None


Action = Union[Note, Close, Resubmit]


def on_status(rs: RecoveryState, st, now: float) -> Union[Note, UnderClaim]:
    """What a status read means for an open job. ``st`` is a Status, or the error (or None)
    its target's query gave."""
    if isinstance(st, Exception) or st is None:
        n = rs.control_plane_errors + 1
        return Note("control_plane", str(st), replace(rs, control_plane_errors=n),
                    event=("control_plane", {"error": str(st), "consecutive": n}))
    rs = replace(rs, control_plane_errors=0)
    if st.state is JobState.UNKNOWN:
        return _unknown(rs, st, now)
    if not st.state.is_terminal:
        return Note("running", st.state.value, replace(rs, unknown_since=None), progress=True)
    return UnderClaim(rs)


def _unknown(rs: RecoveryState, st, now: float) -> Union[Note, UnderClaim]:
    """The scheduler has no record of the job: a query problem until it lasts LOST_AFTER_S,
    then the job is closed (its outcome cannot be known), never resubmitted blindly."""
    said = st.reason or "status unknown"
    if rs.unknown_since is None:
        return Note("control_plane", said, replace(rs, unknown_since=now), event=("control_plane", {"error": said}))
    why = abandoned(JobState.UNKNOWN, rs.unknown_since, now)
    if why is None:
        return Note("control_plane", said, rs)
    why = f"{why} (last: {st.reason})" if st.reason else why
    return UnderClaim(rs, Close("FAILED", f"lost: {why}", "lost", {"reason": why}, "failed", why))


def settled(job, attempts) -> Optional[Note]:
    """Under the claim, on the rows read with it: whether another watcher already acted."""
    if not is_open(job):
        return Note("claimed", f"already closed ({job.state})")
    latest = attempts[-1]
    if not attempt_ended(latest.state):  # another watcher resubmitted since our status query
        return Note("claimed", f"attempt {latest.attempt} is {latest.state}")
    return None


@dataclass(frozen=True)
class Facts:
    """What the decision on an ended attempt reads besides the job's rows (gathered under the claim)."""

    spec: object  # the job's JobSpec
    progress: Progress
    sharing_root: tuple = ()  # (job id, created) of every job row on the same checkpoint root


def on_ended(job, attempts, facts: Facts, st, now: float) -> Action:
    """The decision on the job's latest attempt, which ended (``settled`` said so)."""
    latest = attempts[-1]
    state = JobState(latest.state)
    reason = latest.reason if latest.state == st.state.value else (latest.reason or st.reason)
    if state is JobState.CANCELLED and hang_cancelled(latest):  # not "cancelled by user": the launcher's cancel
        reason = "hung, and cancelled by the launcher: none of its processes could be killed"
    progress = facts.progress
    if progress.unknown:  # the root did not answer in time: decide nothing from a guess
        return Note("waiting", f"checkpoint root not readable: {progress.error}",
                    event=("storage_timeout", {"error": progress.error}))
    decision = _decision(job, attempts, facts, state, reason, now)
    if isinstance(decision, Done):
        final = "COMPLETED" if state is JobState.COMPLETED else "CANCELLED"
        return Close(final, reason, "done", {"reason": decision.reason}, "done", decision.reason)
    if isinstance(decision, Stop):
        return Close("FAILED", decision.reason, "stopped", {"reason": decision.reason, "attempt": latest.attempt,
                     "exit_code": latest.exit_code}, "failed", decision.reason)
    if isinstance(decision, Superseded):
        return Close(SUPERSEDED, decision.reason, "superseded", {"reason": decision.reason, "attempt": latest.attempt,
                     "attempt_state": state.value}, "superseded", decision.reason)
    if isinstance(decision, GiveUp):
        return Close(GAVE_UP, f"gave up: {decision.reason}", "gave_up",
                     {"reason": decision.reason, "failure": decision.failure.value if decision.failure else None},
                     "gave_up", decision.reason)
    return _retry(RecoveryState.load(job.meta), decision, latest, facts.spec, st, now)


def _decision(job, attempts, facts: Facts, state: JobState, reason: str, now: float):
    """policy.decide on the job's history, and a retry of an attempt that ended too long ago given up."""
    progress = facts.progress
    resumes = takeover.resume_steps(job.job_id, [a.attempt for a in attempts], progress.history)
    history = []
    for a, nxt in zip(attempts, attempts[1:]):
        codes = facts.spec.recovery.bad_nodes.exit_codes
        fc = (classify(JobState(a.state), hung(a), exit_code=a.exit_code, node_exit_codes=codes,
                       hang_cancelled=hang_cancelled(a))
              if a.state in JobState.__members__ else None)
        if fc is not None:
            history.append(PastFailure(a.attempt, fc, _resume(resumes, a.attempt), _resume(resumes, nxt.attempt)))
    superseded = ""
    if job.ckpt_root:
        superseded = takeover.superseded_by(job.job_id, job.created, progress.history, facts.sharing_root)
    latest = attempts[-1]
    event = Event(attempt=latest.attempt, state=state, resume_step=_resume(resumes, latest.attempt),
                  committed_step=progress.committed_step, reason=reason,
                  spent_usd=sum(a.cost_usd or 0.0 for a in attempts), superseded_by=superseded,
                  exit_code=latest.exit_code, hung=hung(latest), hang_cancelled=hang_cancelled(latest))
    decision = decide(history, event, Budgets.from_spec(facts.spec), now)
    stale = abandoned(state, latest.ended, now) if isinstance(decision, Retry) else None
    return GiveUp(stale, decision.failure) if stale else decision


def _retry(rs: RecoveryState, decision: Retry, latest, spec, st, now: float) -> Action:
    """A retry waits out its delay (scheduled once, in the recovery state), then resubmits."""
    if rs.retry_at is None and decision.delay_s > 0:
        return Note("waiting", decision.reason, replace(rs, retry_at=now + decision.delay_s),
                    event=("retry_scheduled", {"reason": decision.reason, "delay_s": decision.delay_s}))
    if rs.retry_at is not None and now < rs.retry_at:
        return Note("waiting", decision.reason)
    avoid = cool_down(rs.avoid, st, decision, spec, now, Handle.from_json(latest.handle).extra.get("infra"))
    return Resubmit(latest.attempt + 1, decision, replace(rs, retry_at=None, avoid=avoid), tuple(sorted(avoid)),
                    spec)


def hung(attempt) -> bool:
    """Whether the launcher killed ATTEMPT's processes after a hang (its meta's ``hang``,
    ``launcher.recovery.hang``) and no in-job rerun took over after it."""
    return bool(((attempt.meta or {}).get(HANG_META) or {}).get("killed"))


def hang_cancelled(attempt) -> bool:
    """Whether the launcher cancelled ATTEMPT through its backend after a hang, none of its
    processes having been killable (``launcher.recovery.hang``): its end, CANCELLED too, is a HANG."""
    return bool(((attempt.meta or {}).get(HANG_META) or {}).get("cancelled"))


def _resume(resumes: dict, attempt: int) -> Optional[int]:
    s = resumes.get(attempt)
    return None if s is None or s < 0 else s


def cool_down(avoid: dict, st, decision: Retry, spec, now: float, infra=None) -> dict:
    """Placements to keep away from, with when each is allowed again: the region that just
    preempted the job (or had no capacity) is blocked for recovery.placement_cooldown."""
    avoid = {p: until for p, until in avoid.items() if until > now}
    cloud, region = st.extra.get("cloud"), st.extra.get("region")
    if not (cloud and region) and infra and infra.count("/") >= 1:  # where it was launched
        cloud, region = infra.split("/")[:2]
    if decision.failure in (FailureClass.PREEMPTED, FailureClass.NO_CAPACITY) and cloud and region:
        avoid[f"{cloud}/{region}".lower()] = now + (spec.recovery.placement_cooldown or 0)
    return avoid
