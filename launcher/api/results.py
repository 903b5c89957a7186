"""What the library facade (``launcher.api.facade.Launcher``) returns: typed results, and a job's
log stream. Re-exported by ``launcher.api.facade``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Optional

from launcher.api.spec_results import Rendered, Validated  # noqa: F401 - every result importable from here
from launcher.backend.protocols import Handle
from launcher.launching.tracking import refresh
from launcher.sweep.cancelling import summary_line

if TYPE_CHECKING:
    from launcher.api.context import App
    from launcher.state.store import JobRow
    from launcher.core.status import Status


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
class ConfigInfo:
    """``Launcher.config_info``: which config file is read, and whether it exists (without it:
    the built-in targets only)."""

    path: str
    exists: bool

    def to_json(self) -> dict:
        return {"path": self.path, "exists": self.exists}


@dataclass(frozen=True)
class StateMigration:
    """``Launcher.migrate_state``: a SQLite store copied (or, dry, counted) into a PostgreSQL one.
    ``tables``: ``launcher.state.copy.TableCopy`` of every table (rows in the SQLite store,
    already on the server, copied now)."""

    source: str
    target: str  # the URL without its password
    dry_run: bool
    tables: list

    @property
    def copied(self) -> int:
        return sum(t.copied for t in self.tables)

    def to_json(self) -> dict:
        return {"source": self.source, "target": self.target, "dry_run": self.dry_run,
                "tables": {t.table: {"in_source": t.in_source, "present": t.present,
                                     ("to_copy" if self.dry_run else "copied"): t.to_copy if self.dry_run else t.copied}
                           for t in self.tables}}


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


@dataclass(frozen=True)
class LoginInfo:
    """``Launcher.login``: a target's shared OpenSSH connection (``transport: openssh``)."""

    target: str
    where: str  # user@host[:port]
    control_path: str  # the master's socket on this machine
    persist: str  # ControlPersist: how long it stays open when idle
    status: str  # "logged in", "already logged in", "logged out", "not logged in"


@dataclass(frozen=True)
class SweepStatus:
    """``Launcher.sweep``: a sweep's counts by state and its element table (the shape of
    ``launcher.sweep.summary.summarize``; ``to_json()`` is what ``launcher status SWEEP --json`` prints)."""

    sweep_id: str
    size: int
    metric: Optional[str]  # the early-stop metric, if any
    counts: dict  # state -> number of elements, in the table's order
    elements: list  # one dict per element: index, params, state, step, metric, metrics, rung, reason, attempts

    @classmethod
    def from_json(cls, d: dict) -> "SweepStatus":
        return cls(d["sweep"], d["size"], d["metric"], d["counts"], d["elements"])

    def to_json(self) -> dict:
        return {"sweep": self.sweep_id, "size": self.size, "metric": self.metric, "counts": self.counts,
                "elements": self.elements}


@dataclass(frozen=True)
class SweepCancelled:
    """``Launcher.cancel`` of a sweep (or of one ELEMENT of it): a report per element cancelled
    (``launcher.recovery.cancel.CancelReport``)."""

    sweep_id: str
    element: Optional[int]  # None: the whole sweep
    reports: list

    @property
    def ok(self) -> bool:
        """Every cancel went through (a failed one leaves its element open)."""
        return all(r.ok for r in self.reports)

    def summary_line(self) -> str:
        """The line ``launcher cancel SWEEP`` ends with: how many were cancelled now, already, or not."""
        return summary_line(self.sweep_id, self.reports)


@dataclass(frozen=True)
class SweepReport:
    """``Launcher.report_sweep``: element time by category, goodput and cost summed over a
    sweep's elements, one row per element and the best one. ``data`` is the whole report, the
    shape of ``launcher.report.sweep`` (what ``launcher report SWEEP --json`` prints)."""

    sweep_id: str
    size: int
    counts: dict
    elements: list
    best: Optional[dict]  # the best element's row, or None (best_reason says why)
    best_reason: Optional[str]
    data: dict = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict) -> "SweepReport":
        return cls(d["sweep"], d["size"], d["counts"], d["elements"], d.get("best"), d.get("best_reason"), d)

    def to_json(self) -> dict:
        return self.data


@dataclass(frozen=True)
class Lineage:
    """``Launcher.lineage``: which run, commit, spec and environment produced a checkpoint.
    ``data`` is the whole record, the shape of ``launcher.provenance.lineage.lineage`` (what
    ``launcher lineage --json`` prints)."""

    root: str
    checkpoint: dict  # the checkpoint's entry: path, step, generation, state, name, created, files
    run_id: Optional[str]
    run: Optional[dict]  # the run's RUN.json record, None when none was found
    data: dict = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict) -> "Lineage":
        return cls(d["root"], d["checkpoint"], d.get("run_id"), d.get("run"), d)

    def to_json(self) -> dict:
        return self.data


@dataclass(frozen=True)
class RunDiff:
    """``Launcher.diff``: what differs between two runs' provenance (the shape of
    ``launcher.provenance.diff.diff_runs``; ``to_json()`` is what ``launcher diff --json`` prints).
    Each change row is {"key", "change", "a", "b"}."""

    a: Optional[str]  # run ids
    b: Optional[str]
    config: list
    code: list
    packages: dict  # {"added", "removed", "changed"}
    versions: list
    run: list
    same: bool

    @classmethod
    def from_json(cls, d: dict) -> "RunDiff":
        return cls(d["a"], d["b"], d["config"], d["code"], d["packages"], d["versions"], d["run"], d["same"])

    def to_json(self) -> dict:
        return {"a": self.a, "b": self.b, "config": self.config, "code": self.code, "packages": self.packages,
                "versions": self.versions, "run": self.run, "same": self.same}


@dataclass(frozen=True)
class GcResult:
    """``Launcher.gc``: what garbage collection did (or, dry_run, would do) under a checkpoint root
    (the shape of ``launcher.checkpoint.gc``; ``to_json()`` is what ``checkpoints --gc --json`` prints)."""

    kept: list  # paths
    deleted: list  # paths
    quarantined: list  # {"path", "to", "reason"}
    skipped: list  # {"path", "reason"}
    dry_run: bool

    @classmethod
    def from_json(cls, d: dict) -> "GcResult":
        return cls(d["kept"], d["deleted"], d["quarantined"], d["skipped"], d["dry_run"])

    def to_json(self) -> dict:
        return {"kept": self.kept, "deleted": self.deleted, "quarantined": self.quarantined,
                "skipped": self.skipped, "dry_run": self.dry_run}


@dataclass(frozen=True)
class BackendInfo:
    """``Launcher.backends``: one installed backend, and why it cannot load (the row of
    ``launcher.backend.registry.Registry.describe``; ``to_json()`` is ``launcher backends --json``'s)."""

    name: str
    source: str  # "built-in" or the distribution that provides it
    entry_point: str  # "module:Class"
    status: str  # "ok" or "unavailable"
    error: Optional[str] = None
    shadowed: list = field(default_factory=list)  # third-party entries refused: a built-in has the name

    @classmethod
    def from_json(cls, d: dict) -> "BackendInfo":
        return cls(d["name"], d["source"], d["entry_point"], d["status"], d["error"], d["shadowed"])

    def to_json(self) -> dict:
        return {"name": self.name, "source": self.source, "entry_point": self.entry_point, "status": self.status,
                "error": self.error, "shadowed": self.shadowed}


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
        st = refresh(self._app, [self._app.store.get_job(self.job_id)]).get(self.job_id)
        if st is not None and not isinstance(st, Exception):
            self.status = st
            return st.state.is_terminal
        return False

    def __iter__(self) -> Iterator[str]:
        backend = self._app.backend(self._target)
        return iter(backend.logs(Handle.from_json(self._handle), follow=self._follow, done=self._done))
