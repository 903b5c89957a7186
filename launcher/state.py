"""Job state in SQLite (WAL) under ``$LAUNCHER_HOME``.

Three tables: ``jobs`` (one row per launched spec), ``attempts`` (one row per
submission or restart: native id, state, reason, resume step, cost) and
``events`` (every decision with its reason). Secrets never reach this file: the
spec stores secret *names* only, and ``record_event`` redacts known patterns.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from .errors import LauncherError

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
  job_id     TEXT PRIMARY KEY,
  name       TEXT NOT NULL,
  target     TEXT NOT NULL,
  backend    TEXT NOT NULL,
  spec_path  TEXT,
  spec_yaml  TEXT NOT NULL,
  created    REAL NOT NULL,
  updated    REAL NOT NULL,
  state      TEXT NOT NULL,
  reason     TEXT NOT NULL DEFAULT '',
  handle     TEXT,
  ckpt_root  TEXT,
  last_step  INTEGER,
  meta       TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS attempts (
  job_id       TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
  attempt      INTEGER NOT NULL,
  target       TEXT NOT NULL,
  native_id    TEXT,
  handle       TEXT,
  submitted    REAL NOT NULL,
  state        TEXT NOT NULL,
  reason       TEXT NOT NULL DEFAULT '',
  native_state TEXT NOT NULL DEFAULT '',
  exit_code    INTEGER,
  started      REAL,
  ended        REAL,
  resume_step  INTEGER,
  cost_usd     REAL,
  meta         TEXT NOT NULL DEFAULT '{}',
  PRIMARY KEY (job_id, attempt)
);
CREATE TABLE IF NOT EXISTS events (
  id      INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id  TEXT NOT NULL,
  ts      REAL NOT NULL,
  kind    TEXT NOT NULL,
  detail  TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id, id);
"""


@dataclass(frozen=True)
class JobRow:
    job_id: str
    name: str
    target: str
    backend: str
    spec_path: Optional[str]
    spec_yaml: str
    created: float
    updated: float
    state: str
    reason: str
    handle: Optional[str]
    ckpt_root: Optional[str]
    last_step: Optional[int]
    meta: dict


@dataclass(frozen=True)
class AttemptRow:
    job_id: str
    attempt: int
    target: str
    native_id: Optional[str]
    handle: Optional[str]
    submitted: float
    state: str
    reason: str
    native_state: str
    exit_code: Optional[int]
    started: Optional[float]
    ended: Optional[float]
    resume_step: Optional[int]
    cost_usd: Optional[float]
    meta: dict


class StateStore:
    def __init__(self, home: Path):
        from .statedb import open_db, prepare_home

        self.home = Path(home)
        self.path = self.home / "state.db"
        prepare_home(self.home, self.path)
        # never re-initialises an existing file; damaged, read-only, locked or full: StateStoreError
        self.db = open_db(self.path, SCHEMA)
        self.db.executescript(SCHEMA)

    def close(self):
        self.db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:  # a failed COMMIT (disk full) may have rolled back already
                self.db.execute("ROLLBACK")
            raise

    def job_dir(self, job_id: str) -> Path:
        d = self.home / "jobs" / job_id
        d.mkdir(parents=True, exist_ok=True)
        return d

    # ---- jobs
    def begin_job(self, job_id, name, target, backend, spec_path, spec_yaml, ckpt_root=None, meta=None):
        now = time.time()
        with self.tx() as db:
            db.execute(
                "INSERT INTO jobs(job_id,name,target,backend,spec_path,spec_yaml,created,updated,state,ckpt_root,meta)"
                " VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                (job_id, name, target, backend, spec_path, spec_yaml, now, now, "SUBMITTING", ckpt_root,
                 json.dumps(meta or {})))

    def forget_job(self, job_id: str) -> None:
        """Remove a job whose submission failed: nothing is recorded as submitted."""
        with self.tx() as db:
            db.execute("DELETE FROM attempts WHERE job_id=?", (job_id,))
            db.execute("DELETE FROM events WHERE job_id=?", (job_id,))
            db.execute("DELETE FROM jobs WHERE job_id=?", (job_id,))

    def record_attempt(self, job_id, attempt, target, handle_json, native_id, state="PENDING",
                       reason="", resume_step=None, meta=None):
        now = time.time()
        with self.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO attempts(job_id,attempt,target,native_id,handle,submitted,state,reason,"
                "resume_step,meta) VALUES(?,?,?,?,?,?,?,?,?,?)",
                (job_id, attempt, target, native_id, handle_json, now, state, reason, resume_step,
                 json.dumps(meta or {})))
            db.execute("UPDATE jobs SET handle=?, state=?, target=?, updated=? WHERE job_id=?",
                       (handle_json, state, target, now, job_id))

    def update_attempt(self, job_id, attempt, **fields):
        if not fields:
            return
        if "meta" in fields and isinstance(fields["meta"], dict):
            fields["meta"] = json.dumps(fields["meta"])
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.tx() as db:
            db.execute(f"UPDATE attempts SET {cols} WHERE job_id=? AND attempt=?",
                       (*fields.values(), job_id, attempt))

    def update_job(self, job_id, **fields):
        if "meta" in fields and isinstance(fields["meta"], dict):
            fields["meta"] = json.dumps(fields["meta"])
        fields["updated"] = time.time()
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.tx() as db:
            db.execute(f"UPDATE jobs SET {cols} WHERE job_id=?", (*fields.values(), job_id))

    def get_job(self, job_id: str) -> JobRow:
        row = self.db.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if row is None:
            rows = self.db.execute("SELECT * FROM jobs WHERE job_id LIKE ? ORDER BY created DESC",
                                   (job_id.replace("%", "") + "%",)).fetchall()
            if len(rows) == 1:
                row = rows[0]
            elif len(rows) > 1:
                raise LauncherError(f"job id '{job_id}' is ambiguous: " + ", ".join(r["job_id"] for r in rows[:10]))
            else:
                raise LauncherError(f"no job '{job_id}' in {self.path} (see `launcher status`)")
        return _job(row)

    def list_jobs(self, active_only: bool = False, limit: int = 1000) -> list[JobRow]:
        q = "SELECT * FROM jobs"
        if active_only:
            q += (" WHERE state NOT IN ('COMPLETED','FAILED','CANCELLED','TIMEOUT','PREEMPTED','NODE_FAIL',"
                  "'OUT_OF_MEMORY','NO_CAPACITY','FAILED_SETUP','GAVE_UP')")
        q += " ORDER BY created DESC LIMIT ?"
        return [_job(r) for r in self.db.execute(q, (limit,)).fetchall()]

    def attempts(self, job_id: str) -> list[AttemptRow]:
        rows = self.db.execute("SELECT * FROM attempts WHERE job_id=? ORDER BY attempt", (job_id,)).fetchall()
        return [AttemptRow(**{**dict(r), "meta": json.loads(r["meta"] or "{}")}) for r in rows]

    def latest_attempt(self, job_id: str) -> Optional[AttemptRow]:
        a = self.attempts(job_id)
        return a[-1] if a else None

    # ---- events
    def record_event(self, job_id: str, kind: str, **detail) -> None:
        from .redact import redact_obj

        with self.tx() as db:
            db.execute("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)",
                       (job_id, time.time(), kind, json.dumps(redact_obj(detail), default=str)))

    def events(self, job_id: str) -> list[dict]:
        rows = self.db.execute("SELECT ts,kind,detail FROM events WHERE job_id=? ORDER BY id", (job_id,)).fetchall()
        return [{"ts": r["ts"], "kind": r["kind"], **json.loads(r["detail"])} for r in rows]


def _job(row) -> JobRow:
    d = dict(row)
    d["meta"] = json.loads(d.get("meta") or "{}")
    return JobRow(**d)


def new_job_id(name: str) -> str:
    import re
    import secrets

    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:24] or "job"
    return f"{slug}-{secrets.token_hex(3)}"
