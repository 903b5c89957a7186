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

On a team's PostgreSQL store (``url``: ``$LAUNCHER_STATE_URL`` or the config's ``state_url``)
the session is opened with ``default_transaction_read_only`` (the server refuses any write),
is never created or migrated (an empty database: ``exists() == False``), and sees the rows the
role may read (row-level security: ``launcher.state.team``). ``job_summaries`` reads the page's
meta in Python there (PostgreSQL has no ``json_valid``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Optional
from urllib.parse import quote

from launcher.core.errors import LauncherError
from launcher.core.status import is_final
from launcher.state.store import StateStore
from launcher.state.sweeps import SweepStore
from launcher.state.bulk import BulkStore
from launcher.state.db import (APPLICATION_ID, SQLiteConnection, StateStoreFailure, as_store_error, busy_timeout,
                               check_file, check_intact, describe_failure)
from launcher.state.engines import missing_driver, shown
from launcher.state.schema import SCHEMA_VERSION


class ReadOnly(LauncherError):
    """Something tried to write through a read-only store."""


class ReadOnlyStore(StateStore):
    """The store of HOME for reading (see the module docstring). Like ``StateStore``, each
    thread gets its own connection: give it a fixed set of threads (a pool), not one per
    request, since each connection stays open until ``close``."""

    def __init__(self, home: Path, url: str = ""):  # not super().__init__: it creates the home and the store
        self.home = Path(home)
        self.url = url  # a team's PostgreSQL store (docs/team-store.md), else the SQLite file under HOME
        if url:
            self.path = shown(url)
        else:
            self.path = self.home / "state.db"
        self._local = threading.local()
        self._conns: list = []
        self._conns_lock = threading.Lock()
        self.sweeps = SweepStore(self)
        self.bulk = BulkStore(self)

    def exists(self) -> bool:
        if self.url:  # a server's database with the launcher's tables (never created from here)
            return self.db.version is not None
        return self.path.exists()

    @property
    def db(self) -> sqlite3.Connection:
        c = getattr(self._local, "db", None)
        if c is not None and getattr(c, "broken", False):  # a PostgreSQL server restarted: a new session
            with self._conns_lock:
                self._conns = [x for x in self._conns if x is not c]
            c.close()
            c = None
        if c is None:
            with self._conns_lock:
                # the file is checked (opened and closed by Python) only before this process holds a
                # connection to it: closing any descriptor of a file drops every POSIX lock the process
                # holds on it, those of SQLite's open connections included, and a writer elsewhere
                # would then delete the WAL and its index from under them (they would read on from
                # a stale snapshot)
                c = _open_server(self.url) if self.url else _open_read_only(self.path, check=not self._conns)
                self._conns.append(c)
            self._local.db = c
        return c

    @contextmanager
    def tx(self, jobs=None):
        raise ReadOnly(f"the state store {self.path} is open read-only here: nothing is written")
        yield  # pragma: no cover

    def job_dir(self, job_id: str) -> Path:  # the base class creates it
        return self.home / "jobs" / job_id

    # ---- reads the web view needs beyond the base class's
    def count_jobs(self, where: Optional[dict] = None) -> int:
        cond, args = self._where(where)
        return int(self.db.execute(f"SELECT COUNT(*) FROM jobs{cond}", args).fetchone()[0])

    def _where(self, where: Optional[dict]) -> tuple[str, tuple]:
        """The WHERE clause of the web view's filters (``launcher serve``): WHERE's "state",
        "target", "owner" (a team's store only: SQLite has no owner column) equal, "text" a
        case-insensitive part of the name or the job id. Values are bound, never formatted in."""
        where = where or {}
        conds, args = [], []
        for col in ("state", "target", "owner"):
            if where.get(col) and (col != "owner" or self.url):
                conds.append(f"{col} = ?")
                args.append(str(where[col]))
        if where.get("text"):
            like = "%" + str(where["text"]).lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            conds.append("(LOWER(name) LIKE ? ESCAPE '\\' OR LOWER(job_id) LIKE ? ESCAPE '\\')")
            args += [like, like]
        return (" WHERE " + " AND ".join(conds) if conds else ""), tuple(args)

    def facet_counts(self) -> dict:
        """{"state": {state: n}, "target": {target: n}, "owner": {owner: n} (a team's store)}
        over every job: the web view's state counts and its filters' choices."""
        out = {}
        for col in ("state", "target") + (("owner",) if self.url else ()):
            rows = self.db.execute(f"SELECT {col}, COUNT(*) FROM jobs GROUP BY {col} ORDER BY {col}").fetchall()
            out[col] = {r[0]: int(r[1]) for r in rows}
        return out

    def job_summaries(self, offset: int, limit: int, where: Optional[dict] = None) -> tuple[list[dict], dict]:
        """(rows, unreadable) of one page of the jobs, newest first, in ONE query: each row's
        columns, its sweep and element index, whether a decision closed it, and its attempts'
        count, summed recorded cost and how many have one. The job listing of the web view, which
        needs no spec and no attempt rows ("open": ``launcher.state.rows.is_open``); a row whose meta is not a JSON object is left out and
        named in UNREADABLE (job id -> why), as ``readable_rows`` does."""
        q = """
            WITH page AS (SELECT job_id, name, target, backend, state, reason, created, updated, last_step, sweep_id,
                                 meta, handle, spec_yaml FROM jobs{where}
                          ORDER BY created DESC, job_id LIMIT ? OFFSET ?)
            SELECT page.job_id, name, page.target, backend, page.state, page.reason, created, updated, last_step,
                   sweep_id, page.handle, spec_yaml,
                   CASE WHEN json_valid(page.meta) THEN json_type(page.meta) END AS meta_type,
                   CASE WHEN json_valid(page.meta) AND json_type(page.meta) = 'object'
                        THEN json_extract(page.meta, '$.sweep.index') END AS element,
                   CASE WHEN json_valid(page.meta) AND json_type(page.meta) = 'object'
                        THEN json_extract(page.meta, '$.final') END AS closed,
                   COUNT(a.attempt) AS attempts, SUM(a.cost_usd) AS cost_usd, COUNT(a.cost_usd) AS priced
            FROM page LEFT JOIN attempts a ON a.job_id = page.job_id
            GROUP BY page.job_id ORDER BY created DESC, page.job_id"""
        rows, unreadable = [], {}
        if self.url:  # PostgreSQL has no json_valid: the page's meta is read here (a page, not every job)
            q = _PORTABLE_SUMMARIES
        cond, args = self._where(where)
        for r in self.db.execute(q.format(where=cond), (*args, int(limit), int(offset))).fetchall():
            if self.url:
                r = _summary_of(r)
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


# job_summaries' query on a team's PostgreSQL store: each row's meta comes along, read by ``_summary_of``
# (and its owner column, which only that store has)
_PORTABLE_SUMMARIES = """
    WITH page AS (SELECT job_id, name, target, backend, state, reason, created, updated, last_step, sweep_id,
                         meta, handle, spec_yaml, owner FROM jobs{where} ORDER BY created DESC, job_id LIMIT ? OFFSET ?)
    SELECT page.job_id, name, page.target, backend, page.state, page.reason, created, updated, last_step,
           sweep_id, page.meta, page.handle, spec_yaml, page.owner,
           COUNT(a.attempt) AS attempts, SUM(a.cost_usd) AS cost_usd, COUNT(a.cost_usd) AS priced
    FROM page LEFT JOIN attempts a ON a.job_id = page.job_id
    GROUP BY page.job_id, name, page.target, backend, page.state, page.reason, created, updated, last_step,
             sweep_id, page.meta, page.handle, spec_yaml, page.owner
    ORDER BY created DESC, page.job_id"""

_JSON_TYPES = {dict: "object", list: "array", str: "text", bool: "true", int: "integer", float: "real",
               type(None): "null"}


def _summary_of(row) -> dict:
    """A row of ``_PORTABLE_SUMMARIES`` as the SQLite query gives it: ``meta_type`` (SQLite's
    json_type, None when not JSON), the element index and the closing mark out of its meta."""
    d = dict(row)
    try:
        meta = json.loads(d.pop("meta") or "{}")
    except ValueError:
        return {**d, "meta_type": None}
    obj = isinstance(meta, dict)
    sweep = meta.get("sweep") if obj else None
    return {**d, "meta_type": _JSON_TYPES.get(type(meta), "object"),
            "element": sweep.get("index") if isinstance(sweep, dict) else None,
            "closed": meta.get("final") if obj else None}


def _open_server(url: str):
    """A read-only session on a team's PostgreSQL store (``launcher.state.pg.connect``)."""
    try:
        # the driver loads only for a PostgreSQL store
        from launcher.state import pg
    except ImportError as e:
        raise StateStoreFailure(missing_driver(url, e)) from None
    return pg.connect(url, read_only=True)


def _open_read_only(path: Path, check: bool = True):
    timeout = busy_timeout()
    if check:
        check_file(path)  # a FIFO, a 0-byte or a foreign file: refused before SQLite opens it
    try:
        db = sqlite3.connect(f"file:{quote(str(Path(path).resolve()))}?mode=ro", uri=True, timeout=timeout,
                             isolation_level=None, factory=SQLiteConnection, check_same_thread=False)
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
