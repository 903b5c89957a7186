"""The recovery decision: a pure function of the job's history, the event that just
happened and the clock. The loop around it (``launcher.recovery.watch``) does the I/O.

Each failure class has its own budget (from the spec's ``recovery:`` section).
CONTROL_PLANE errors (scheduler, SSH or cloud API hiccups) are retried with backoff
and never counted as a job failure. Two restarts that resume from the same
committed step with no new commit stop the job: a crash loop burns money, not
progress. The dollar budget (``cost.max_total_usd``) is checked before every retry.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union

from launcher.launching.submission import QUIET_S  # the quiet time: one figure for launches and resubmissions
from launcher.spec.model import Recovery
from launcher.core.exitcodes import EXIT_NO_RESTART
from launcher.core.status import JobState


class FailureClass(str, enum.Enum):
    """Why an attempt ended, each class with its own budget (``spec.recovery``). Five are the
    job states of the same name; a failed program or set-up is APP_ERROR; CONTROL_PLANE is a
    transient error of the scheduler, SSH or cloud API (retried, never counted as a job failure)."""

    PREEMPTED = JobState.PREEMPTED.value
    NODE_FAIL = JobState.NODE_FAIL.value
    TIMEOUT = JobState.TIMEOUT.value
    OUT_OF_MEMORY = JobState.OUT_OF_MEMORY.value
    NO_CAPACITY = JobState.NO_CAPACITY.value
    APP_ERROR = "APP_ERROR"
    HANG = "HANG"  # alive but no step reported for recovery.hang: killed by the launcher (launcher.recovery.hang)
    CONTROL_PLANE = "CONTROL_PLANE"


_BY_STATE = {
    **{JobState(c.value): c for c in (FailureClass.PREEMPTED, FailureClass.NODE_FAIL, FailureClass.TIMEOUT,
                                      FailureClass.OUT_OF_MEMORY, FailureClass.NO_CAPACITY)},
    JobState.FAILED: FailureClass.APP_ERROR,
    JobState.FAILED_SETUP: FailureClass.APP_ERROR,
}

BUDGET_FIELD = {
    FailureClass.PREEMPTED: "preemption",
    FailureClass.NODE_FAIL: "node_failure",
    FailureClass.TIMEOUT: "timeout",
    FailureClass.OUT_OF_MEMORY: "out_of_memory",
    FailureClass.APP_ERROR: "app_error",
    FailureClass.NO_CAPACITY: "no_capacity",
    FailureClass.HANG: "hang_restarts",
}


def classify(state: JobState, hung: bool = False, *, exit_code: Optional[int] = None,
             node_exit_codes=(), hang_cancelled: bool = False) -> Optional[FailureClass]:
    """None for states that are not failures (COMPLETED, CANCELLED, or still active). HUNG: the
    launcher killed the attempt's processes after a hang (its meta's ``hang``): a failed end is a
    HANG. HANG_CANCELLED: none could be killed and the launcher cancelled the attempt through its
    backend instead: any end but COMPLETED, CANCELLED included, is a HANG. A failed program whose
    EXIT_CODE is one of NODE_EXIT_CODES (``recovery.bad_nodes.exit_codes``: the program's way of
    saying its node is bad) is a NODE_FAIL."""
    if hang_cancelled and state.is_terminal and state is not JobState.COMPLETED:
        return FailureClass.HANG
    if hung and state.is_terminal and state not in (JobState.COMPLETED, JobState.CANCELLED):
        return FailureClass.HANG
    failure = _BY_STATE.get(state)
    if failure is FailureClass.APP_ERROR and exit_code is not None and exit_code in node_exit_codes:
        return FailureClass.NODE_FAIL
    return failure


_SPEC = Recovery()  # the budgets' defaults are the spec's (``recovery:``), defined there once


@dataclass(frozen=True)
class Budgets:
    preemption: int = _SPEC.preemption
    node_failure: int = _SPEC.node_failure
    timeout: int = _SPEC.timeout
    out_of_memory: int = _SPEC.out_of_memory
    app_error: int = _SPEC.app_error
    no_capacity: int = _SPEC.no_capacity
    hang_restarts: int = _SPEC.hang_restarts
    max_total_usd: Optional[float] = None
    node_exit_codes: tuple = ()  # exits that name a bad node (recovery.bad_nodes.exit_codes): NODE_FAIL
    backoff_s: float = 30.0
    max_backoff_s: float = 900.0

    @classmethod
    def from_spec(cls, spec) -> "Budgets":
        r = spec.recovery
        return cls(**{f: getattr(r, f) for f in BUDGET_FIELD.values()}, max_total_usd=spec.cost.max_total_usd,
                   node_exit_codes=tuple(r.bad_nodes.exit_codes))


@dataclass(frozen=True)
class PastFailure:
    """One earlier failed attempt, as the policy needs to see it."""

    attempt: int
    failure: FailureClass
    resume_step: Optional[int]  # the committed step that attempt started from (None: fresh)
    committed_step: Optional[int]  # the newest committed step when it ended


@dataclass(frozen=True)
class Event:
    attempt: int
    state: JobState
    resume_step: Optional[int]
    committed_step: Optional[int]
    reason: str = ""
    spent_usd: float = 0.0
    control_plane_errors: int = 0  # consecutive, for the backoff
    superseded_by: str = ""  # why the checkpoint root now belongs to a newer run (takeover.superseded_by)
    exit_code: Optional[int] = None  # the attempt's exit status, where the scheduler gave one
    hung: bool = False  # the launcher killed it after a hang (recovery.hang)
    hang_cancelled: bool = False  # ... or, nothing to kill, cancelled it through its backend: not a user's cancel


@dataclass(frozen=True)
class Retry:
    reason: str
    failure: FailureClass
    delay_s: float = 0.0
    counts_as_failure: bool = True
    avoid: tuple = ()  # placements (regions, nodes) to keep away from for a cool-down


@dataclass(frozen=True)
class GiveUp:
    reason: str
    failure: Optional[FailureClass] = None


@dataclass(frozen=True)
class Done:
    reason: str


@dataclass(frozen=True)
class Stop:
    """The program asked not to be restarted (exit 93): the job is closed, FAILED."""

    reason: str


@dataclass(frozen=True)
class Superseded:
    """A newer run (or generation) took the checkpoint root over: the user handled this job."""

    reason: str


Decision = Union[Retry, GiveUp, Done, Superseded, Stop]


def decide(history: list[PastFailure], event: Event, budgets: Budgets, now: float = 0.0) -> Decision:
    """What to do after ``event`` ended an attempt. ``history`` holds earlier failures only."""
    if event.state is JobState.COMPLETED:
        return Done("completed")
    if event.state is JobState.CANCELLED and not event.hang_cancelled:
        return Done("cancelled")
    if event.superseded_by:
        return Superseded(event.superseded_by)
    if event.exit_code == EXIT_NO_RESTART and event.state.is_terminal:
        return Stop(f"the program exited {EXIT_NO_RESTART}: it asked never to be restarted (NVRx's convention); "
                    "no requeue, no resubmission")
    if event.state is JobState.UNKNOWN or event.control_plane_errors:
        delay = min(budgets.max_backoff_s, budgets.backoff_s * 2 ** max(0, event.control_plane_errors - 1))
        return Retry(f"control plane error ({event.reason or 'status unknown'}): retrying the query, "
                     f"not the job", FailureClass.CONTROL_PLANE, delay_s=delay, counts_as_failure=False)
    failure = classify(event.state, event.hung, exit_code=event.exit_code, node_exit_codes=budgets.node_exit_codes,
                       hang_cancelled=event.hang_cancelled)
    if failure is None:
        return GiveUp(f"unexpected terminal state {event.state.value}")
    if budgets.max_total_usd is not None and event.spent_usd >= budgets.max_total_usd:
        return GiveUp(f"cost budget exhausted: ${event.spent_usd:.2f} spent of ${budgets.max_total_usd:.2f}",
                      failure)
    used = 1 + sum(1 for h in history if h.failure is failure)
    budget = getattr(budgets, BUDGET_FIELD[failure])
    if used > budget:
        return GiveUp(f"{failure.value} budget exhausted: {used} failure(s), recovery.{BUDGET_FIELD[failure]}"
                      f" allows {budget}", failure)
    progressed = _progressed(event.resume_step, event.committed_step)
    if failure is FailureClass.TIMEOUT and not progressed:
        return GiveUp("timed out without committing a new checkpoint: continuing would time out again", failure)
    stalled = _stalled_restarts(history, event)
    if stalled is not None:
        return GiveUp(f"no progress: two restarts resumed from {stalled} with no new commit", failure)
    delay = 0.0
    if failure is FailureClass.NO_CAPACITY:
        delay = min(budgets.max_backoff_s, budgets.backoff_s * 2 ** (used - 1))
    return Retry(f"{failure.value} ({event.reason or 'no reason given'}): attempt {event.attempt + 1}, "
                 f"{used} of {budget} {BUDGET_FIELD[failure]} restarts used", failure, delay_s=delay)


def _progressed(resume: Optional[int], committed: Optional[int]) -> bool:
    if committed is None:
        return False
    return resume is None or committed > resume


def _stalled_restarts(history: list[PastFailure], event: Event) -> Optional[str]:
    """The step that the last two *restarts* both resumed from, committing nothing newer."""
    runs = [(h.attempt, h.resume_step, h.committed_step) for h in history
            if h.failure is not FailureClass.NO_CAPACITY]
    runs.append((event.attempt, event.resume_step, event.committed_step))
    stalled = 0
    for attempt, resume, committed in reversed(runs):
        if attempt <= 1 or resume != event.resume_step or _progressed(resume, committed):
            break
        stalled += 1
    if stalled >= 2:
        return "a fresh start" if event.resume_step is None else f"step {event.resume_step}"
    return None


# ---- SUBMITTING rows: a launch whose outcome is not recorded (it died, timed out, was
# interrupted, or is still running); settled from the scheduler and the launcher's own traces
SUBMITTING_GRACE_S = 600.0  # longer than any submission takes; a launch still running is left alone


@dataclass(frozen=True)
class Reconcile:
    action: str  # "adopt" | "adopt_trace" | "wait" | "started" | "fail"
    reason: str


def reconcile_submitting(found: bool, age_s: float, grace_s: float = SUBMITTING_GRACE_S, *,
                         looked: bool = True, lookup_error: str = "", launch_over: bool = False,
                         quiet_s: float = 0.0, trace: str = "", quiet_needed_s: float = QUIET_S) -> Reconcile:
    """Pure: what to do with a job row left in SUBMITTING.

    FOUND: the scheduler has a job with its dedupe token (LOOKED false: the lookup failed,
    LOOKUP_ERROR says why). AGE_S: since the launch began. LAUNCH_OVER: the launch is known
    to have ended (it recorded its outcome as unknown, or its process is gone), QUIET_S ago.
    TRACE: what the launcher's own traces say of a start ("id X": the attempt's start was
    claimed by job X; "started": its checkpoint root records the start; "": none).

    "Nothing ran" is concluded only from a lookup that worked, found nothing and left no
    trace, once the launch is over (and QUIET_NEEDED_S passed, for a stalled controller to
    show what it accepted) or its grace has passed."""
    if found:
        return Reconcile("adopt", "the scheduler has the job (found by its dedupe token): the launch that "
                                  "submitted it died before recording it")
    if not looked:
        return Reconcile("wait", f"the scheduler could not be asked for its dedupe token ({lookup_error or 'no answer'}); "
                                 "its outcome is still unknown")
    if trace.startswith("id "):
        return Reconcile("adopt_trace", f"its start was claimed by {trace[3:]} (the job folder's start record): it "
                                        "ran although the scheduler no longer lists it")
    if trace:
        return Reconcile("started", "it started (its checkpoint root records the start) but the scheduler no "
                                    "longer has it: its outcome cannot be known; relaunch it to resume from the "
                                    "last checkpoint")
    if not launch_over and age_s < grace_s:
        return Reconcile("wait", f"submitting for {age_s:.0f}s; the launch may still be running")
    if launch_over and quiet_s < quiet_needed_s and age_s < grace_s:
        return Reconcile("wait", f"the launch ended {quiet_s:.0f}s ago without knowing whether the scheduler "
                                 "accepted it; waiting for the scheduler to show it")
    return Reconcile("fail", f"the launch ended before the scheduler accepted the job (no job with its dedupe "
                             f"token after {age_s:.0f}s, and no trace of a start): nothing ran; launch it again")


# ---- jobs nobody should recover any more
LOST_AFTER_S = 3600.0  # the job's status has been UNKNOWN (no record of it, or a state that never settles) this long
STALE_AFTER_S = 7 * 86400.0  # an ended attempt that no watch decided on for this long


def abandoned(state: JobState, since: Optional[float], now: float, lost_after_s: float = LOST_AFTER_S,
              stale_after_s: float = STALE_AFTER_S) -> Optional[str]:
    """Pure: why an open job must be closed instead of recovered, or None. ``since`` is when
    the job's status became UNKNOWN, or when its latest attempt ended."""
    if since is None:
        return None
    age = now - since
    if state is JobState.UNKNOWN and age >= lost_after_s:
        return (f"its status has been unknown for {age / 60:.0f} min: its outcome cannot be known; relaunch it "
                "to resume from the last checkpoint")
    if state.is_terminal and state is not JobState.COMPLETED and age >= stale_after_s:
        return (f"its last attempt ended {age / 86400:.1f} days ago and was never recovered: not resubmitting a "
                "stale job (relaunch it to resume from the last checkpoint)")
    return None
