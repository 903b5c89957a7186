"""Job states that keep *why*: recovery needs PREEMPTED and NODE_FAIL, not FAILED."""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, field
from typing import Optional


class JobState(str, enum.Enum):
    SUBMITTING = "SUBMITTING"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    REQUEUED = "REQUEUED"
    COMPLETING = "COMPLETING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    NO_CAPACITY = "NO_CAPACITY"
    FAILED_SETUP = "FAILED_SETUP"
    UNKNOWN = "UNKNOWN"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL

    @property
    def is_active(self) -> bool:
        return not self.is_terminal


# An attempt's run is over (the scheduler's view); recovery decides what follows.
TERMINAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
                      JobState.PREEMPTED, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY,
                      JobState.NO_CAPACITY, JobState.FAILED_SETUP})


def attempt_ended(state: str) -> bool:
    """Whether an attempt row's state (a JobState value) is terminal; an unknown name is not."""
    return state in JobState.__members__ and JobState(state).is_terminal


def attempt_live(state: str) -> bool:
    """Whether a state (an attempt's, or an open job's mirror of it) is a run that is queued or
    running now: a JobState that is not terminal, UNKNOWN excluded (nothing is known of it)."""
    return (state in JobState.__members__ and not JobState(state).is_terminal
            and state != JobState.UNKNOWN.value)


# ---- a job's own state (the jobs table). A job is open (recovery may still act on it) until
# one of FINAL_STATES closes it; while open it shows its current attempt's state (PENDING,
# RUNNING, PREEMPTED, ATTEMPT_FAILED ...): queued, running, or ended and awaiting the decision.
GAVE_UP = "GAVE_UP"  # a recovery budget ran out, or the job went stale
SUPERSEDED = "SUPERSEDED"  # a newer run took the job's checkpoint root over
STOPPED = "STOPPED"  # a sweep element ended by early stopping: final, and not a failure
# a sweep element the launcher holds back until a slot of max_parallel frees (a backend without
# arrays, ``launcher.sweep.one_by_one``): open, not final, no attempt yet
QUEUED = "QUEUED"
FINAL_STATES = frozenset({JobState.COMPLETED.value, JobState.FAILED.value, JobState.CANCELLED.value,
                          GAVE_UP, SUPERSEDED, STOPPED})

# The job-level name of an attempt that failed while recovery has not decided yet: the
# attempt's own FAILED would read as (and is) a final job state.
ATTEMPT_FAILED = "ATTEMPT_FAILED"


# Every state a job shows while open: SUBMITTING, QUEUED, and its latest attempt's (``job_state_for``).
# Listings of the open jobs ask for these by name (``state IN (...)``), which the jobs_state index
# answers without reading the store's closed history (``NOT IN`` FINAL_STATES reads every row).
OPEN_STATES = frozenset({s.value for s in JobState} - FINAL_STATES) | {ATTEMPT_FAILED, QUEUED}


def job_state_for(attempt_state: str) -> str:
    """The state a job shows while open, for its latest attempt's state."""
    return ATTEMPT_FAILED if attempt_state == JobState.FAILED.value else attempt_state


def is_final(job_state: str) -> bool:
    return job_state in FINAL_STATES


def closes_job(attempt_state: str) -> bool:
    """An attempt that ends this way closes its job at once (COMPLETED, CANCELLED): no
    recovery decision follows."""
    return is_final(job_state_for(attempt_state))


@dataclass(frozen=True)
class Status:
    state: JobState
    native_state: str = ""
    reason: str = ""
    exit_code: Optional[int] = None
    nodes: str = ""
    restarts: int = 0
    start_time: Optional[float] = None
    end_time: Optional[float] = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The status as JSON-ready values (``from_dict`` reads it back). Written out field by
        field: a watch pass writes one per open job into its snapshot, and ``dataclasses.asdict``
        cost 12-25 us a status against 2-6 us (tests/unit/test_status_dict.py keeps the two equal)."""
        return {"state": self.state.value, "native_state": self.native_state, "reason": self.reason,
                "exit_code": self.exit_code, "nodes": self.nodes, "restarts": self.restarts,
                "start_time": self.start_time, "end_time": self.end_time, "extra": copy.deepcopy(self.extra)}

    @classmethod
    def from_dict(cls, d: dict) -> "Status":
        d = dict(d)
        d["state"] = JobState(d["state"])
        return cls(**d)
