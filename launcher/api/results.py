"""What the library facade (``launcher.api.facade.Launcher``) returns: typed results, and a job's
log stream. Re-exported by ``launcher.api.facade``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Optional

if TYPE_CHECKING:
    from launcher.api.context import App
    from launcher.backend.protocols import Request
    from launcher.state.store import JobRow
    from launcher.core.status import Status


@dataclass(frozen=True)
class Validated:
    spec: object  # the JobSpec, relative paths resolved
    notes: list = field(default_factory=list)


@dataclass(frozen=True)
class Rendered:
    target: str
    text: str  # exactly what would be submitted (sbatch script, task YAML)
    request: "Request"
    seed: int  # the LAUNCHER_SEED the text carries
    notes: list = field(default_factory=list)


@dataclass(frozen=True)
class Submitted:
    job_id: str
    target: str
    backend: str
    native_id: str
    notes: list = field(default_factory=list)


@dataclass(frozen=True)
class CheckpointListing:
    root: str
    generation: int
    entries: list  # launcher.checkpoint entries, newest first

    @property
    def latest(self):
        """The committed checkpoint a restart resumes from, or None."""
        return next((e for e in self.entries if e.committed), None)


@dataclass(frozen=True)
class TargetInfo:
    name: str
    backend: Optional[str] = None  # None: the target could not be resolved (see error)
    facts: Optional[dict] = None  # None: not probed (or the probe failed)
    error: Optional[str] = None

    def to_dict(self) -> dict:
        d: dict = {"name": self.name}
        if self.backend is not None:
            d["backend"] = self.backend
        if self.facts is not None:
            d["facts"] = self.facts
        if self.error is not None:
            d["error"] = self.error
        return d


def exit_status(st: Optional["Status"]) -> int:
    """The exit status ``launch --follow`` ends with: the job's own (1-255), 0 for a
    completed job without one, 1 for anything else or an unknown end."""
    if st is None:
        return 1
    if st.exit_code is not None:
        return st.exit_code if 0 <= st.exit_code < 256 else 1
    return 0 if st.state.value == "COMPLETED" else 1


class LogStream:
    """A job's output as chunks of text. Following stops when the job ends; ``status`` is
    then the final status seen (None when it was never read)."""

    def __init__(self, app: "App", job: "JobRow", follow: bool):
        self._app, self.job_id, self._follow = app, job.job_id, follow
        self._target, self._handle = job.target, job.handle
        self.status: Optional["Status"] = None

    def _done(self) -> bool:
        from launcher.launching.tracking import refresh

        st = refresh(self._app, [self._app.store.get_job(self.job_id)]).get(self.job_id)
        if st is not None and not isinstance(st, Exception):
            self.status = st
            return st.state.is_terminal
        return False

    def __iter__(self) -> Iterator[str]:
        from launcher.backend.protocols import Handle

        backend = self._app.backend(self._target)
        return iter(backend.logs(Handle.from_json(self._handle), follow=self._follow, done=self._done))
