"""Each ``launcher watch`` process's heartbeat: one ``watchers`` row per watcher process,
upserted once per pass (its host, pid and user, when it started, when its last pass ended, how
long that pass took, and its interval). ``launcher status`` and ``launcher launch`` read the
rows to warn when jobs are open and no watcher passed lately (the rule:
``launcher.api.always_on.stale_watchers``).

A row is never a lock and decides nothing: any number of watchers may run, each writes its own
row, and a row of a watcher that died stays until it is pruned (``PRUNE_AFTER_S`` after its
last pass, by the next watcher that starts).
"""

from __future__ import annotations

import getpass
import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Optional

from launcher.core.status import OPEN_STATES

PRUNE_AFTER_S = 7 * 86400  # a watcher's row is deleted this long after its last pass
READ_LIMIT = 50  # the newest rows `status` reads


@dataclass(frozen=True)
class WatcherRow:
    """One watcher's heartbeat (times in epoch seconds)."""

    watcher_id: str
    host: str
    pid: int
    user_name: str
    started: float
    last_pass: float
    pass_s: float
    interval_s: float


def user_name() -> str:
    """This process's user name ("uid N" where the system has no name for it)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry, no LOGNAME/USER
        return f"uid {os.getuid()}"


class Heartbeat:
    """The heartbeat of one watcher process: ``beat`` after each pass writes its row (one
    upsert); the first beat also prunes the rows of watchers gone for ``PRUNE_AFTER_S``."""

    def __init__(self, interval_s: float, now: Optional[float] = None):
        self.interval_s = float(interval_s)
        self.started = time.time() if now is None else now
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.user = user_name()
        self.watcher_id = f"{self.host}:{self.pid}:{secrets.token_hex(4)}"
        self.pruned = False

    def beat(self, store, pass_started: float, now: float) -> None:
        """Record in STORE a pass that started at PASS_STARTED and ended at NOW."""
        row = (self.watcher_id, self.host, self.pid, self.user, self.started, now, max(0.0, now - pass_started),
               self.interval_s)
        with store.tx(jobs=()) as db:  # this watcher's own row; pruning deletes rows no one writes
            if not self.pruned:
                db.execute("DELETE FROM watchers WHERE last_pass < ?", (now - PRUNE_AFTER_S,))
            db.execute("INSERT INTO watchers(watcher_id, host, pid, user_name, started, last_pass, pass_s, interval_s) "
                       "VALUES(?,?,?,?,?,?,?,?) ON CONFLICT (watcher_id) DO UPDATE SET host=excluded.host, "
                       "pid=excluded.pid, user_name=excluded.user_name, started=excluded.started, "
                       "last_pass=excluded.last_pass, pass_s=excluded.pass_s, interval_s=excluded.interval_s", row)
        self.pruned = True


def watcher_rows(store, limit: int = READ_LIMIT) -> list[WatcherRow]:
    """The heartbeats of the LIMIT watchers that passed last, newest first."""
    rows = store.db.execute("SELECT watcher_id, host, pid, user_name, started, last_pass, pass_s, interval_s "
                            "FROM watchers ORDER BY last_pass DESC LIMIT ?", (limit,)).fetchall()
    return [WatcherRow(r[0], r[1], int(r[2]), r[3], float(r[4]), float(r[5]), float(r[6]), float(r[7]))
            for r in rows]


def open_job_count(store) -> int:
    """How many jobs this store shows open (not in a final state: one COUNT, no row read;
    a job an older version closed in its meta alone is counted as open here)."""
    return open_jobs_since(store)[0]


def open_jobs_since(store) -> tuple:
    """(how many jobs are open, when the oldest of them was created, or None): one query."""
    opened = sorted(OPEN_STATES)
    q = f"SELECT count(*), min(created) FROM jobs WHERE state IN ({','.join('?' * len(opened))})"
    count, oldest = store.db.execute(q, opened).fetchone()
    return int(count), (float(oldest) if oldest is not None else None)
