"""What ``launcher status`` shows: a gatherer that brings the store up to date (SUBMITTING
rows reconciled, open jobs refreshed, checkpoint progress recorded) and pure formatters.

``launcher.api.facade.Launcher.status`` / ``.jobs`` and the ``status`` verb both call
``gather_job`` / ``gather_jobs``; what they have to say on the way (a job adopted, a
target that could not be asked) goes to ``note`` as the line the CLI prints on stderr.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Optional

from launcher.recovery.current import job_up_to_date, jobs_up_to_date, reconcile_lines  # noqa: F401 - re-exported
from launcher.recovery.injob import summary as in_job_summary
from launcher.state.store import AttemptRow, JobRow, is_open

Note = Callable[[str], None]

ATTEMPT_FIELDS = ("attempt", "target", "native_id", "state", "reason", "native_state", "exit_code", "submitted",
                  "started", "ended", "resume_step", "cost_usd")


@dataclass(frozen=True)
class JobDetail:
    """One job as ``launcher status JOB`` shows it: the row, every attempt, every event."""

    job: JobRow
    attempts: list[AttemptRow]
    events: list[dict]
    notes: list[str] = field(default_factory=list)

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def state(self) -> str:
        return self.job.state

    @property
    def open(self) -> bool:
        return is_open(self.job)

    def to_dict(self) -> dict:
        r = self.job
        return {"job_id": r.job_id, "name": r.name, "target": r.target, "backend": r.backend, "state": r.state,
                "reason": r.reason, "open": is_open(r), "last_step": r.last_step, "ckpt_root": r.ckpt_root,
                **({"owner": r.owner} if r.owner else {}),  # a team's store (launcher.state.team)
                # resume_tier (local, peer, durable; multi-tier checkpoints): the attempt's meta, copied
                # there from its GENERATIONS.json record as resume_step is copied to its column
                "attempts": [{**{k: getattr(a, k) for k in ATTEMPT_FIELDS},
                              "resume_tier": (a.meta or {}).get("resume_tier"),
                              # reruns of its step inside its allocation (recovery.in_job), from the root too
                              "in_job": (a.meta or {}).get("in_job")} for a in self.attempts],
                "events": self.events}

    def to_json(self) -> dict:
        """What ``launcher status JOB --json`` prints (``json.dumps(..., default=str)``)."""
        return self.to_dict()


def summary_dict(r: JobRow) -> dict:
    return {"job_id": r.job_id, "name": r.name, "target": r.target, "state": r.state, "reason": r.reason,
            "open": is_open(r), "created": r.created, **({"owner": r.owner} if r.owner else {}),
            **({"sweep": r.meta["sweep"]["id"], "element": r.meta["sweep"]["index"]} if r.meta.get("sweep") else {})}


# ---------------------------------------------------------------- gathering (talks to the store and targets)
def gather_job(app, job: str, note: Optional[Note] = None) -> JobDetail:
    """Bring one job up to date (reconcile a SUBMITTING row, refresh its status, record
    its checkpoint progress: ``launcher.recovery.current``, which `report` shares) and read it back."""
    notes: list[str] = []
    store = app.store
    row = job_up_to_date(app, store.get_job(job), _collector(notes, note))
    return JobDetail(row, store.attempts(row.job_id), store.events(row.job_id), notes)


def gather_jobs(app, show_all: bool = False, note: Optional[Note] = None) -> list[JobRow]:
    """The most recent jobs (50, or 1000 with ``show_all``), open ones brought up to date."""
    say = _collector([], note)
    store = app.store
    limit = 1000 if show_all else 50
    rows = store.list_jobs(active_only=False, limit=limit)
    if jobs_up_to_date(app, rows, say):
        rows = store.list_jobs(active_only=False, limit=limit)
    for job_id, (_state, why) in sorted(store.unreadable.items()):  # a damaged row: named, never hidden
        say(f"{job_id}: not shown: {why}")
    return rows


def _collector(notes: list, note: Optional[Note]) -> Note:
    def say(line: str) -> None:
        notes.append(line)
        if note is not None:
            note(line)

    return say


# ---------------------------------------------------------------- pure formatting
def resumed(step) -> str:
    """The step an attempt resumed from, as its generation recorded it (-1: a fresh start)."""
    if step is None:
        return "-"
    return "fresh" if step < 0 else str(step)


def job_lines(d: JobDetail) -> list[str]:
    row = d.job
    lines = [f"job {row.job_id} ({row.name}) on {row.target} [{row.backend}]: {row.state}"
             + (f" ({row.reason})" if row.reason else "")]
    if row.ckpt_root:
        lines.append(f"checkpoints: {row.ckpt_root}  last committed step: "
                     f"{row.last_step if row.last_step is not None else '-'}")
    lines.append(f"{'attempt':>7}  {'target':<12} {'native id':<12} {'state':<14} {'resumed':>7}  "
                 f"{'cost $':>8}  reason")
    for a in d.attempts:
        lines.append(f"{a.attempt:>7}  {a.target:<12} {a.native_id or '-':<12} {a.state:<14} "
                     f"{resumed(a.resume_step):>7}  "
                     f"{(f'{a.cost_usd:.2f}' if a.cost_usd is not None else '-'):>8}  {a.reason}")
    for a in d.attempts:
        restarts = in_job_summary(a.meta)
        if restarts:
            lines.append(f"  attempt {a.attempt}: {restarts} (recovery.in_job: no requeue, no resubmission)")
    decisions = [e for e in d.events if e["kind"] not in ("submitted",)]
    for e in decisions[-10:]:
        detail = {k: v for k, v in e.items() if k not in ("ts", "kind")}
        lines.append(f"  event {e['kind']}: {json.dumps(detail, default=str)}")
    return lines


def job_json(d: JobDetail) -> str:
    return json.dumps(d.to_dict(), indent=2, default=str)


def jobs_lines(rows: list[JobRow]) -> list[str]:
    if not rows:
        return ["no jobs"]
    lines = [f"{'job':<32} {'target':<12} {'state':<14} reason"]
    lines += [f"{r.job_id:<32} {r.target:<12} {r.state:<14} {r.reason}" for r in rows]
    return lines


def jobs_json(rows: list[JobRow]) -> str:
    return json.dumps([summary_dict(r) for r in rows], indent=2)
