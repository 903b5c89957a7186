"""Job states that keep *why*: recovery needs PREEMPTED and NODE_FAIL, not FAILED."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
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


TERMINAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
                      JobState.PREEMPTED, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY,
                      JobState.NO_CAPACITY, JobState.FAILED_SETUP})


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
        d = asdict(self)
        d["state"] = self.state.value
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Status":
        d = dict(d)
        d["state"] = JobState(d["state"])
        return cls(**d)
