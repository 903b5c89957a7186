"""What recovery remembers about a job between watch cycles, typed.

It is kept in the job row's ``meta`` JSON, beside the launch's own keys (``spec_base``,
``seed``, ...), under the keys earlier versions wrote: a store written by them loads
unchanged, and they can still read what this version writes. ``load`` and ``as_meta`` are
the only places that know those keys; a field at its default is not stored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Optional

from launcher.state.rows import CLOSED_KEY


@dataclass(frozen=True)
class BurstRace:
    """A job that waited too long in one queue got a copy launched elsewhere; the first copy
    to run wins (``launcher.recovery.burst``)."""

    phase: str  # "racing" until one copy won, then "done"
    queued_attempt: int  # the copy that was waiting in the queue
    queued_target: str
    queued_handle: str  # its Handle, as JSON
    copy_attempt: int  # the copy launched on the burst target
    copy_target: str
    winner: Optional[str] = None  # the target whose copy won

    # stored under the names earlier versions used
    _KEYS = {"queued_attempt": "slurm_attempt", "queued_target": "slurm_target", "queued_handle": "slurm_handle",
             "copy_attempt": "cloud_attempt", "copy_target": "cloud_target"}

    @property
    def racing(self) -> bool:
        return self.phase == "racing"

    def won_by(self, target: str) -> "BurstRace":
        return replace(self, phase="done", winner=target)

    @classmethod
    def load(cls, d: dict) -> "BurstRace":
        return cls(phase=str(d.get("phase") or ""), queued_attempt=int(d.get("slurm_attempt") or 0),
                   queued_target=str(d.get("slurm_target") or ""), queued_handle=str(d.get("slurm_handle") or ""),
                   copy_attempt=int(d.get("cloud_attempt") or 0), copy_target=str(d.get("cloud_target") or ""),
                   winner=d.get("winner"))

    def as_meta(self) -> dict:
        d = {"phase": self.phase, **{k: getattr(self, f) for f, k in self._KEYS.items()}}
        if self.winner is not None:
            d["winner"] = self.winner
        return d


@dataclass(frozen=True)
class RecoveryState:
    closed: bool = False  # closed by a decision (older versions kept the attempt's state on a closed job)
    retry_at: Optional[float] = None  # a scheduled retry is due then (clock seconds)
    avoid: dict = field(default_factory=dict)  # placement ("cloud/region") -> kept away from until then
    burst: Optional[BurstRace] = None
    control_plane_errors: int = 0  # consecutive failed status queries
    unknown_since: Optional[float] = None  # when the scheduler stopped knowing the job
    attempt: int = 1  # the attempt a row still SUBMITTING submits (its dedupe token names it)

    @property
    def racing(self) -> bool:
        return self.burst is not None and self.burst.racing

    @classmethod
    def load(cls, meta: dict) -> "RecoveryState":
        """From a job row's meta (any version's); a key that is absent (or null) takes its default."""
        got = {f: meta[k] for f, k in _KEYS.items() if meta.get(k) is not None}
        for f, decode in _DECODE.items():
            if f in got:
                got[f] = decode(got[f])
        return cls(**got)

    def as_meta(self) -> dict:
        """The meta keys this state is stored under (fields at their default left out)."""
        out = {}
        for f, k in _KEYS.items():
            v = getattr(self, f)
            if v != getattr(_DEFAULT, f):
                out[k] = v.as_meta() if isinstance(v, BurstRace) else dict(v) if isinstance(v, dict) else v
        return out

    def changes_since(self, before: "RecoveryState") -> dict:
        """{meta key: new value, or None to remove it} for what differs from BEFORE."""
        old, new = before.as_meta(), self.as_meta()
        return {k: new.get(k) for k in _KEYS.values() if old.get(k) != new.get(k)}


_KEYS = {f.name: f.name for f in dataclasses.fields(RecoveryState)}
_KEYS["closed"] = CLOSED_KEY
_DECODE = {"closed": bool, "retry_at": float, "avoid": lambda d: {str(p): float(t) for p, t in dict(d).items()},
           "burst": BurstRace.load, "control_plane_errors": int, "unknown_since": float, "attempt": int}
_DEFAULT = RecoveryState()
