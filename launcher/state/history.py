"""History that can be cleaned: ``launcher gc`` removes ended jobs older than a cutoff, their
rows in every table of the store, and their local job folders (issue 33; docs/operations.md).

What it never touches:

- an open job (any state that is not final), nor one whose row changed after the cutoff;
- an element of a sweep that is not over: a sweep goes whole (its row and every element),
  once every element is ended and older than the cutoff;
- a job whose notifications are not settled (one still pending in the outbox, or a closing
  that asks for a notification and has not been decided yet): the watcher still owes it;
- on a team's PostgreSQL store, another person's job, unless this role is the watchers'
  (``StateStore.may_act``; the server's row-level security says the same);
- a checkpoint root (``launcher checkpoints --gc`` is for those): a job folder that holds
  its job's checkpoint root is left where it is, and the result says so. The one exception is
  a function call's folder under ``$LAUNCHER_HOME/calls`` (the launcher's own default root for
  ``Launcher.submit(fn)``): it goes once every job using it goes (``launcher.state.calls``).

The choice is a pure function (``choose``) over what the store reads in a few queries. The
rows of each chunk of jobs go in ONE transaction (a crash leaves every job either whole or
gone), and the folders are removed after their rows, so nothing the store still names is
ever deleted from under it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from launcher.core.status import FINAL_STATES
from launcher.state import calls
from launcher.state.outbox import PENDING, Outbox
from launcher.state.team import HOMES_TABLE

CHUNK = 500  # jobs per delete transaction: a big gc never holds the writers for long
JOB_TABLES = ("attempts", "events", "claims", "notifications", "provenance", "watch_marks")  # keyed by job_id, besides jobs


@dataclass(frozen=True)
class Kept:
    job_id: str
    why: str


@dataclass
class Choice:
    """What ``choose`` decided: the jobs to remove, the sweeps that go with them, and the
    candidates kept (each with why)."""

    jobs: list = field(default_factory=list)  # JobRows
    sweeps: list = field(default_factory=list)  # sweep ids
    kept: list = field(default_factory=list)  # Kept


def choose(candidates, sweep_blockers: dict, unsettled: set, may_act) -> Choice:
    """Pure. CANDIDATES: the ended jobs older than the cutoff (JobRows). SWEEP_BLOCKERS:
    {sweep id: why it must stay} for the candidates' sweeps that still have an element open
    or newer than the cutoff. UNSETTLED: job ids whose notifications are not settled.
    MAY_ACT(row): whether this role may remove the row."""
    out = Choice()
    by_sweep: dict = {}

    def why_kept(row) -> Optional[str]:
        if not may_act(row):
            return f"{row.owner or 'another role'}'s job"
        if row.job_id in unsettled:
            return "its notifications are not settled yet (launcher watch delivers them)"
        return None

    for row in candidates:
        if row.sweep_id:
            by_sweep.setdefault(row.sweep_id, []).append(row)
            continue
        why = why_kept(row)
        if why is None:
            out.jobs.append(row)
        else:
            out.kept.append(Kept(row.job_id, why))
    for sweep_id, rows in sorted(by_sweep.items()):
        whys = {r.job_id: why_kept(r) for r in rows}
        stays = sweep_blockers.get(sweep_id) or ("another element of its sweep stays" if any(whys.values()) else None)
        if stays is None:
            out.jobs += rows
            out.sweeps.append(sweep_id)
        else:
            out.kept += [Kept(r.job_id, whys[r.job_id] or stays) for r in rows]
    return out


def holds_root(folder: Path, ckpt_root: Optional[str]) -> bool:
    """Pure: whether removing FOLDER would remove (part of) the checkpoint root CKPT_ROOT."""
    if not ckpt_root or ckpt_root.startswith("s3://"):
        return False
    root = os.path.normpath(os.path.abspath(os.path.expanduser(ckpt_root)))
    base = os.path.normpath(os.path.abspath(str(folder)))
    return root == base or root.startswith(base + os.sep)


class HistoryStore:
    """The store's side of ``launcher gc`` (``StateStore.history``)."""

    def __init__(self, store):
        self.store = store

    def candidates(self, cutoff: float) -> list:
        """Ended jobs whose row last changed before CUTOFF (oldest first)."""
        finals = sorted(FINAL_STATES)
        q = (f"SELECT * FROM jobs WHERE state IN ({','.join('?' * len(finals))}) AND updated < ? "
             "ORDER BY updated")
        return self.store.readable_rows(self.store.db.execute(q, (*finals, cutoff)).fetchall())

    def sweep_blockers(self, sweep_ids, cutoff: float) -> dict:
        """{sweep id: why it stays} for SWEEP_IDS with an element that is open or newer than CUTOFF."""
        finals = sorted(FINAL_STATES)
        out: dict = {}
        ids = sorted(set(sweep_ids))
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i:i + CHUNK]
            q = (f"SELECT sweep_id, job_id, state FROM jobs WHERE sweep_id IN ({','.join('?' * len(chunk))}) AND "
                 f"(state NOT IN ({','.join('?' * len(finals))}) OR updated >= ?)")
            for r in self.store.db.execute(q, (*chunk, *finals, cutoff)).fetchall():
                open_ = r["state"] not in FINAL_STATES
                out.setdefault(r["sweep_id"], f"its sweep {r['sweep_id']} has element {r['job_id']} "
                                              f"{'still ' + r['state'] if open_ else 'ended after the cutoff'}")
        return out

    def unsettled(self) -> set:
        """Job ids whose notifications are not settled: a row still pending in the outbox, or a
        closing that may ask for one and has not been decided on (``Outbox.closed_unnoticed``)."""
        rows = self.store.db.execute("SELECT DISTINCT job_id FROM notifications WHERE state = ?",
                                     (PENDING,)).fetchall()
        return {r["job_id"] for r in rows} | set(Outbox(self.store).closed_unnoticed(limit=1_000_000))

    def homes(self, job_id: str) -> list:
        """The homes the job's local files may be under: this store's, and on a team's store the
        one it was launched from."""
        found = [Path(self.store.home)]
        if self.store.url:
            row = self.store.db.execute(f"SELECT home FROM {HOMES_TABLE} WHERE job_id=?", (job_id,)).fetchone()
            if row is not None and row[0] and Path(row[0]) not in found:
                found.append(Path(row[0]))
        return found

    def folders(self, job_id: str) -> list:
        """The job's local folders that exist: under this store's home, and on a team's store
        the one under the home it was launched from, when this process reaches it. Nothing is
        created (``StateStore.job_dir`` makes the folder it names)."""
        found = [h / "jobs" / job_id for h in self.homes(job_id)]
        out = []
        for d in found:
            if d.is_dir() and not d.is_symlink() and d not in out:
                out.append(d)
        return out

    def remove(self, job_ids, sweep_ids) -> int:
        """Delete JOB_IDS' rows from every table (one transaction per chunk of jobs), then the
        rows of SWEEP_IDS. Returns how many job rows went."""
        tables = JOB_TABLES + ((HOMES_TABLE,) if self.store.url else ())
        ids, gone = list(job_ids), 0
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i:i + CHUNK]
            marks = ",".join("?" * len(chunk))
            with self.store.tx() as db:
                for table in tables:
                    db.execute(f"DELETE FROM {table} WHERE job_id IN ({marks})", chunk)
                gone += db.execute(f"DELETE FROM jobs WHERE job_id IN ({marks})", chunk).rowcount
        sweeps = list(sweep_ids)
        for i in range(0, len(sweeps), CHUNK):
            chunk = sweeps[i:i + CHUNK]
            with self.store.tx() as db:
                # only a sweep none of whose elements is left (one launched meanwhile keeps it)
                db.execute(f"DELETE FROM sweeps WHERE sweep_id IN ({','.join('?' * len(chunk))}) AND NOT EXISTS "
                           "(SELECT 1 FROM jobs j WHERE j.sweep_id = sweeps.sweep_id)", chunk)
        return gone


@dataclass
class Collected:
    """What ``collect`` did (or, DRY_RUN, would do)."""

    cutoff: float
    dry_run: bool
    removed: list = field(default_factory=list)  # {"job_id", "state", "ended", "sweep_id", "folders"}
    sweeps: list = field(default_factory=list)
    kept: list = field(default_factory=list)  # {"job_id", "why"}
    left: list = field(default_factory=list)  # {"job_id", "path", "why"}: a folder not removed
    calls: list = field(default_factory=list)  # {"path", "jobs"}: function call folders (launcher.state.calls)

    def to_json(self) -> dict:
        return {"cutoff": self.cutoff, "dry_run": self.dry_run, "removed": self.removed, "sweeps": self.sweeps,
                "kept": self.kept, "left": self.left, "calls": self.calls}


def collect(store, cutoff: float, dry_run: bool = False) -> Collected:
    """Remove (DRY_RUN: name) the ended jobs older than CUTOFF that ``choose`` lets go, with
    their folders; the store's rows first, each folder after its rows are gone."""
    history = store.history
    candidates = history.candidates(cutoff)
    sweeps = {r.sweep_id for r in candidates if r.sweep_id}
    choice = choose(candidates, history.sweep_blockers(sweeps, cutoff), history.unsettled(), store.may_act)
    done = Collected(cutoff, dry_run, sweeps=sorted(choice.sweeps),
                     kept=[{"job_id": k.job_id, "why": k.why} for k in choice.kept])
    folders = {r.job_id: history.folders(r.job_id) for r in choice.jobs}
    for r in choice.jobs:
        mine = []
        for d in folders[r.job_id]:
            if holds_root(d, r.ckpt_root):
                done.left.append({"job_id": r.job_id, "path": str(d),
                                  "why": f"it holds the job's checkpoint root {r.ckpt_root} "
                                         f"(launcher checkpoints --gc is for those)"})
            else:
                mine.append(d)
        folders[r.job_id] = mine
        done.removed.append({"job_id": r.job_id, "state": r.state, "ended": r.updated, "sweep_id": r.sweep_id,
                             "folders": [str(d) for d in mine]})
    # the function calls' folders these jobs free, and those no job names (launcher.state.calls)
    free, in_use = calls.choose(store, choice.jobs, lambda r: history.homes(r.job_id))
    free.update({f: [] for f in calls.orphans(store, cutoff)})
    done.left += in_use
    gone = calls.CallsGc()
    if dry_run:
        calls.remove(free, gone, dry_run=True)
        done.calls = gone.removed
        return done
    history.remove([r.job_id for r in choice.jobs], choice.sweeps)
    for r in choice.jobs:
        for d in folders[r.job_id]:
            try:
                shutil.rmtree(d)
            except OSError as e:
                done.left.append({"job_id": r.job_id, "path": str(d), "why": f"could not be removed ({e.strerror})"})
    calls.remove(free, gone, dry_run=False)  # after their jobs' rows: the store names none of them any more
    done.calls, done.left = gone.removed, done.left + gone.left
    return done
