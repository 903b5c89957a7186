"""The state store opened for reading only: what ``launcher serve`` (``launcher.api.readview``)
reads through, so that a web page, however often it is asked for, never writes the store.

``ReadOnlyStore`` is a ``StateStore`` whose connections are opened with SQLite's
``mode=ro`` URI and ``PRAGMA query_only``: SQLite itself refuses any write (SQLITE_READONLY),
whatever method is called, and ``tx`` refuses before SQLite is asked. Opening it never
creates, stamps, migrates or re-initialises anything: a missing store is ``exists() == False``
(nothing to show yet), a store of an older schema is read as it is (a command that writes
brings it up to date), a newer one is refused, and a damaged one is refused exactly as every
command refuses it (``PRAGMA quick_check``). The ``-wal`` and ``-shm`` files beside the
store are SQLite's own coordination files: a reader of a WAL store may create them; the
store's contents, and ``state.db`` itself, are never written.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from launcher.core.errors import LauncherError
from launcher.core.status import is_final
from launcher.state.store import StateStore
from launcher.state.sweeps import SweepStore
from launcher.state.bulk import BulkStore


class ReadOnly(LauncherError):
    """Something tried to write through a read-only store."""


class ReadOnlyStore(StateStore):
    """The store of HOME for reading (see the module docstring). Like ``StateStore``, each
    thread gets its own connection: give it a fixed set of threads (a pool), not one per
    request, since each connection stays open until ``close``."""

    def __init__(self, home: Path):  # not super().__init__: it creates the home and the store
        self.home = Path(home)
        self.path = self.home / "state.db"
        self._local = threading.local()
        self._conns: list = []
        self._conns_lock = threading.Lock()
        self.sweeps = SweepStore(self)
        self.bulk = BulkStore(self)

    def exists(self) -> bool:
        return self.path.exists()

    @property
    def db(self) -> sqlite3.Connection:
        c = getattr(self._local, "db", None)
        if c is None:
            with self._conns_lock:
                # the file is checked (opened and closed by Python) only before this process holds a
                # connection to it: closing any descriptor of a file drops every POSIX lock the process
                # holds on it, those of SQLite's open connections included, and a writer elsewhere
                # would then delete the WAL and its index from under them (they would read on from
                # a stale snapshot)
                c = _open_read_only(self.path, check=not self._conns)
                self._conns.append(c)
            self._local.db = c
        return c

    @contextmanager
    def tx(self):
        raise ReadOnly(f"the state store {self.path} is open read-only here: nothing is written")
        yield  # pragma: no cover

    def job_dir(self, job_id: str) -> Path:  # the base class creates it
        return self.home / "jobs" / job_id

    # ---- reads the web view needs beyond the base class's
    def count_jobs(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])

    def job_summaries(self, offset: int, limit: int) -> tuple[list[dict], dict]:
        """(rows, unreadable) of one page of the jobs, newest first, in ONE query: each row's
        columns, its sweep and element index, whether a decision closed it, and its attempts'
        count, summed recorded cost and how many have one. The job listing of the web view, which
        needs no spec and no attempt rows ("open": ``launcher.state.rows.is_open``); a row whose meta is not a JSON object is left out and
        named in UNREADABLE (job id -> why), as ``readable_rows`` does."""
        q = """
            WITH page AS (SELECT job_id, name, target, backend, state, reason, created, updated, last_step, sweep_id,
                                 meta FROM jobs ORDER BY created DESC, job_id LIMIT ? OFFSET ?)
            SELECT page.job_id, name, page.target, backend, page.state, page.reason, created, updated, last_step,
                   sweep_id,
                   CASE WHEN json_valid(page.meta) THEN json_type(page.meta) END AS meta_type,
                   CASE WHEN json_valid(page.meta) AND json_type(page.meta) = 'object'
                        THEN json_extract(page.meta, '$.sweep.index') END AS element,
                   CASE WHEN json_valid(page.meta) AND json_type(page.meta) = 'object'
                        THEN json_extract(page.meta, '$.final') END AS closed,
                   COUNT(a.attempt) AS attempts, SUM(a.cost_usd) AS cost_usd, COUNT(a.cost_usd) AS priced
            FROM page LEFT JOIN attempts a ON a.job_id = page.job_id
            GROUP BY page.job_id ORDER BY created DESC, page.job_id"""
        rows, unreadable = [], {}
        for r in self.db.execute(q, (int(limit), int(offset))).fetchall():
            d = dict(r)
            kind = d.pop("meta_type")
            if kind != "object":
                unreadable[d["job_id"]] = (d["state"], "its meta is not valid JSON" if kind is None else
                                           f"its meta is not a JSON object (a JSON {kind})")
                continue
            d["open"] = not is_final(d["state"]) and not d.pop("closed")  # ``rows.is_open``, from the columns
            rows.append(d)
        return rows, unreadable

    def sweep_ids(self, limit: int = 1000) -> list[tuple]:
        """[(sweep id, name, size, created)] of the newest sweeps."""
        q = "SELECT sweep_id, name, size, created FROM sweeps ORDER BY created DESC LIMIT ?"
        return [tuple(r) for r in self.db.execute(q, (int(limit),)).fetchall()]


def _open_read_only(path: Path, check: bool = True):
    # the SQLite engine's helpers: a PostgreSQL view never loads them
    from launcher.state.db import (APPLICATION_ID, StoreConnection, StateStoreFailure, as_store_error, busy_timeout,
                                   check_file, check_intact, describe_failure)
    # the SQLite engine's helpers: a PostgreSQL view never loads them
    from launcher.state.schema import SCHEMA_VERSION

    timeout = busy_timeout()
    if check:
        check_file(path)  # a FIFO, a 0-byte or a foreign file: refused before SQLite opens it
    try:
        db = sqlite3.connect(f"file:{quote(str(Path(path).resolve()))}?mode=ro", uri=True, timeout=timeout,
                             isolation_level=None, factory=StoreConnection, check_same_thread=False)
    except sqlite3.Error as e:
        raise (as_store_error(path, e, timeout) or StateStoreFailure(f"cannot open the state store {path}: {e}")) \
            from e
    db.path, db.timeout = str(path), timeout
    db.row_factory = sqlite3.Row
    try:
        db.execute("PRAGMA query_only=ON")
        check_intact(db, path)
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if app_id not in (0, APPLICATION_ID):
            raise StateStoreFailure(describe_failure(path, "notadb", f"application_id {app_id:#x}"))
        if version > SCHEMA_VERSION:
            raise StateStoreFailure(f"the state store {path} has schema version {version}, written by a newer "
                                    f"launcher (this one knows {SCHEMA_VERSION}): upgrade launcher")
    except BaseException:
        db.close()
        raise
    return db
