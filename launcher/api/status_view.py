"""What ``launcher status`` shows: a gatherer that brings the store up to date (SUBMITTING
rows reconciled, open jobs refreshed, checkpoint progress recorded) and pure formatters.

``launcher.api.facade.Launcher.status`` / ``.jobs`` and the ``status`` verb both call
``gather_job`` / ``gather_jobs``; what they have to say on the way (a job adopted, a
target that could not be asked) goes to ``note`` as the line the CLI prints on stderr.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from launcher.core.ages import ago
from launcher.recovery.current import job_up_to_date, jobs_up_to_date, reconcile_lines  # noqa: F401 - re-exported
from launcher.recovery.hangs import HANG_META, summary as hang_summary
from launcher.recovery.injob import summary as in_job_summary
from launcher.state.actors import store_owner
from launcher.state.rows import RESUME_TIER_KEY, attempt_resume_words, job_step
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
    owner: Optional[str] = None  # whose it is: the row's owner (a team's store), else the SQLite store's owner
    refreshed: bool = True  # False: shown as stored (another person's job on a team's store, or a read-only view)

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
                "reason": r.reason, "open": is_open(r), "last_step": job_step(r), "ckpt_root": r.ckpt_root,
                **({"owner": self.owner or r.owner} if self.owner or r.owner else {}),
                # as stored (not brought up to date by this reader) and when its row last changed
                "refreshed": self.refreshed, "updated": r.updated,
                # resume_tier (local, peer, durable; multi-tier checkpoints): the attempt's meta, copied
                # there from its GENERATIONS.json record as resume_step is copied to its column
                "attempts": [{**{k: getattr(a, k) for k in ATTEMPT_FIELDS},
                              "resume_tier": (a.meta or {}).get(RESUME_TIER_KEY),
                              # reruns of its step inside its allocation (recovery.in_job), from the root too
                              "in_job": (a.meta or {}).get("in_job"),
                              # what the launcher did about its hangs (recovery.hang): where the stacks are
                              "hang": (a.meta or {}).get(HANG_META)} for a in self.attempts],
                "events": self.events}

    def to_json(self) -> dict:
        """What ``launcher status JOB --json`` prints (``json.dumps(..., default=str)``)."""
        return self.to_dict()


def summary_dict(r: JobRow, whose: Optional["Whose"] = None) -> dict:
    whose = whose or Whose()
    owner = whose.owner_of(r)
    return {"job_id": r.job_id, "name": r.name, "target": r.target, "state": r.state, "reason": r.reason,
            "open": is_open(r), "created": r.created, **({"owner": owner} if owner else {}),
            "last_step": job_step(r), "updated": r.updated, "refreshed": r.job_id not in whose.stale,
            **({"sweep": r.meta["sweep"]["id"], "element": r.meta["sweep"]["index"]} if r.meta.get("sweep") else {})}


@dataclass(frozen=True)
class Whose:
    """Whose the listed jobs are: OWNER, the owner of a store whose rows name none (SQLite:
    ``launcher.state.actors.store_owner``), and STALE, the ids of the open jobs shown as stored
    because this reader may not bring them up to date (another person's, on a team's store)."""

    owner: Optional[str] = None
    stale: frozenset = frozenset()

    def owner_of(self, r: JobRow) -> Optional[str]:
        return r.owner or self.owner


def whose(app, rows: list[JobRow]) -> Whose:
    """``Whose`` of ROWS as ``gather_jobs`` left them (it refreshes the ones this role may act on)."""
    store = app.store
    return Whose(store_owner(store), frozenset(r.job_id for r in rows if is_open(r) and not store.may_act(r)))


def stale_note(r: JobRow, owner: Optional[str], now: float) -> str:
    """What a row shown as stored says of itself: whose it is, who may bring it up to date, and
    how long ago it last changed (its data is at least that old, or newer)."""
    whom = f"{owner}'s job" if owner else "another person's job"
    return (f"as stored, not refreshed here ({whom}: only its owner or the watchers' role refresh it); "
            f"its row last changed {ago(now - r.updated)} ago")


# ---------------------------------------------------------------- gathering (talks to the store and targets)
def gather_job(app, job: str, note: Optional[Note] = None) -> JobDetail:
    """Bring one job up to date (reconcile a SUBMITTING row, refresh its status, record
    its checkpoint progress: ``launcher.recovery.current``, which `report` shares) and read it back."""
    notes: list[str] = []
    store = app.store
    row = store.get_job(job)
    owner = row.owner or store_owner(store)
    if not store.may_act(row):  # another person's job on a team's store: shown as stored, never written
        return JobDetail(row, store.attempts(row.job_id), store.events(row.job_id), notes, owner, refreshed=False)
    row = job_up_to_date(app, row, _collector(notes, note))
    return JobDetail(row, store.attempts(row.job_id), store.events(row.job_id), notes, owner)


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
def job_lines(d: JobDetail, now: Optional[float] = None) -> list[str]:
    row = d.job
    lines = [f"job {row.job_id} ({row.name}) on {row.target} [{row.backend}]: {row.state}"
             + (f" ({row.reason})" if row.reason else "")]
    owner = d.owner or row.owner
    stale = not d.refreshed and is_open(row)
    if owner or stale:
        note = stale_note(row, owner, time.time() if now is None else now) if stale else ""
        lines.append("; ".join(x for x in (f"owner {owner}" if owner else "", note) if x))
    if row.ckpt_root:
        step = job_step(row)
        lines.append(f"checkpoints: {row.ckpt_root}  last committed step: {step if step is not None else '-'}"
                     + (" (as stored)" if stale else ""))
    lines.append(f"{'attempt':>7}  {'target':<12} {'native id':<12} {'state':<14} {'resumed':<24} "
                 f"{'cost $':>8}  reason")
    for a in d.attempts:
        lines.append(f"{a.attempt:>7}  {a.target:<12} {a.native_id or '-':<12} {a.state:<14} "
                     f"{attempt_resume_words(a):<24} "
                     f"{(f'{a.cost_usd:.2f}' if a.cost_usd is not None else '-'):>8}  {a.reason}")
    for a in d.attempts:
        restarts = in_job_summary(a.meta)
        if restarts:
            lines.append(f"  attempt {a.attempt}: {restarts} (recovery.in_job: no requeue, no resubmission)")
        hang = hang_summary(a.meta)
        if hang:
            lines.append(f"  attempt {a.attempt}: {hang} (recovery.hang)")
    decisions = [e for e in d.events if e["kind"] not in ("submitted",)]
    for e in decisions[-10:]:
        detail = {k: v for k, v in e.items() if k not in ("ts", "kind", "actor")}
        by = f" by {e['actor']}" if e.get("actor") else ""  # who wrote it (launcher.state.actors)
        lines.append(f"  event {e['kind']}{by}: {json.dumps(detail, default=str)}")
    return lines


def job_json(d: JobDetail) -> str:
    return json.dumps(d.to_dict(), indent=2, default=str)


def jobs_lines(rows: list[JobRow], whose: Optional[Whose] = None, now: Optional[float] = None) -> list[str]:
    """The job list: id, owner, target, state, reason; a row shown as stored (``Whose.stale``)
    says so, and how long ago it last changed, before its reason."""
    if not rows:
        return ["no jobs"]
    whose, now = whose or Whose(), time.time() if now is None else now
    lines = [f"{'job':<32} {'owner':<12} {'target':<12} {'state':<14} reason"]
    for r in rows:
        mark = f"[as stored, {ago(now - r.updated)} old] " if r.job_id in whose.stale else ""
        lines.append(f"{r.job_id:<32} {whose.owner_of(r) or '-':<12} {r.target:<12} {r.state:<14} {mark}{r.reason}")
    return lines


def jobs_json(rows: list[JobRow], whose: Optional[Whose] = None) -> str:
    return json.dumps([summary_dict(r, whose) for r in rows], indent=2)
