"""``launcher gc``'s part for function calls: the folders ``Launcher.submit(fn)`` and ``.map``
make under ``$LAUNCHER_HOME/calls`` (``launcher.api.functions``), each the default checkpoint
root of its call's job (or, for a map, the parent of its elements' roots), holding the pickled
function, its arguments and what came of the call.

Such a folder is the launcher's own, not a root a spec named, so it goes with its jobs, under
the rules of the rest of ``launcher gc`` (``launcher.state.history``):

* only once every job whose checkpoint root is the folder or inside it is being removed by
  this gc (an ended job older than the cutoff that gc may remove); a folder another job of the
  store still uses stays, and the result says which job;
* after those jobs' rows are gone (nothing the store names is deleted from under it);
* never through a symbolic link, and never anything outside ``<home>/calls``;
* a folder no job names (a launch that failed after writing the payload) goes when nothing in it
  changed for longer than the cutoff and ``ORPHAN_GRACE_S`` (a launch under way writes its
  payload before its job's row), and only where this role sees every job of the store (SQLite,
  or the watchers' role on a team's store: a person may not see a colleague's jobs).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

CALLS_DIR = "calls"  # under $LAUNCHER_HOME: the default checkpoint roots of function calls
ORPHAN_GRACE_S = 3600.0  # a call folder no job names is left alone this long after its last change


def call_folder(ckpt_root: Optional[str], homes: Iterable[Path]) -> Optional[Path]:
    """Pure: the call folder ``<home>/calls/<id>`` that CKPT_ROOT is, or is inside, for one of
    HOMES; None for any other root (a spec's own, an S3 root)."""
    if not ckpt_root or "://" in ckpt_root:
        return None
    root = os.path.normpath(os.path.abspath(os.path.expanduser(ckpt_root)))
    for home in homes:
        base = os.path.normpath(os.path.abspath(str(Path(home) / CALLS_DIR)))
        if root.startswith(base + os.sep):
            first = root[len(base) + 1:].split(os.sep, 1)[0]
            if first not in ("", ".", ".."):
                return Path(base) / first
    return None


@dataclass
class CallsGc:
    """What happened to the call folders: REMOVED {"path", "jobs"}, LEFT {"job_id", "path", "why"}."""

    removed: list = field(default_factory=list)
    left: list = field(default_factory=list)


def users(store, folder: Path) -> list:
    """(job id, state) of every job of STORE whose checkpoint root is FOLDER or inside it."""
    text = str(folder)
    q = ("SELECT job_id, state FROM jobs WHERE ckpt_root = ? OR substr(ckpt_root, 1, ?) = ? ORDER BY job_id")
    return [(r[0], r[1]) for r in store.db.execute(q, (text, len(text) + 1, text + os.sep)).fetchall()]


def choose(store, removed_rows: list, homes_of) -> tuple[dict, list]:
    """({folder: [job ids]} the REMOVED_ROWS (JobRows gc removes) free, [left entries] of the
    folders another job still uses). HOMES_OF(row): the homes its call folder may be under."""
    by_folder: dict = {}
    for r in removed_rows:
        f = call_folder(r.ckpt_root, homes_of(r))
        if f is not None:
            by_folder.setdefault(f, []).append(r.job_id)
    free, left = {}, []
    for f, jobs in sorted(by_folder.items()):
        others = [(j, s) for j, s in users(store, f) if j not in set(jobs)]
        if others:
            j, s = others[0]
            left.append({"job_id": jobs[0], "path": str(f),
                         "why": f"job {j} ({s}) still uses it" + (f" and {len(others) - 1} more" if others[1:] else "")})
        else:
            free[f] = jobs
    return free, left


def orphans(store, cutoff: float, now: Optional[float] = None) -> list:
    """Call folders under this store's home that no job names and in which nothing changed since
    the cutoff and ``ORPHAN_GRACE_S``; none where this role may not see every job."""
    if store.url and not getattr(store.db, "acts_on_all", False):
        return []
    base = Path(store.home) / CALLS_DIR
    if not base.is_dir() or base.is_symlink():
        return []
    limit = min(cutoff, (time.time() if now is None else now) - ORPHAN_GRACE_S)
    out = []
    for f in sorted(base.iterdir()):
        if f.is_dir() and not f.is_symlink() and not users(store, f) and last_change(f) < limit:
            out.append(f)
    return out


def last_change(folder: Path) -> float:
    """The newest modification time in FOLDER's tree (the folder's own included)."""
    newest = folder.lstat().st_mtime
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except OSError:
                continue
    return newest


def remove(folders: dict, done: CallsGc, dry_run: bool) -> None:
    """Remove FOLDERS ({folder: [job ids]}; orphans: []) unless DRY_RUN, recording each in DONE."""
    for f, jobs in folders.items():
        if f.is_symlink() or not f.is_dir():
            continue
        if not dry_run:
            try:
                shutil.rmtree(f)
            except OSError as e:
                done.left.append({"job_id": jobs[0] if jobs else "", "path": str(f),
                                  "why": f"could not be removed ({e.strerror})"})
                continue
        done.removed.append({"path": str(f), "jobs": list(jobs)})
