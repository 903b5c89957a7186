"""The scheduler stand-in of bench/fleet.py: a backend for the bench only, registered through
the ``launcher.backends`` entry-point group exactly like a third-party plugin (the .dist-info
beside it; bench/fleet.py puts this folder on the watchers' PYTHONPATH). ``launcher/`` names it
nowhere.

Its "scheduler" is a SQLite file shared by every process of a run (target option ``db``), so
separate watcher processes see the same jobs:

- ``sjobs``: one row per scheduler job (native id, launcher job id, attempt, dedupe token,
  target, state, submit and end times, the pid that submitted it);
- ``calls``: one row per batched status call (target, calling pid, when it read, the CPU the
  stand-in itself spent in the call, and the launcher job ids it answered for): what the bench
  computes status calls per tick and how long each job went unobserved from.

A status call answers after ``latency_ms`` (target option), like a scheduler that takes that
long to answer. The bench's driver changes jobs' states in the same file (ends some, preempts
others); a submission is RUNNING at once. ``find`` looks the dedupe token up, so a watcher that
takes a job over adopts what an earlier holder submitted.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import ClassVar, Optional

from pydantic import BaseModel, ConfigDict

from launcher.backend.protocols import Facts, Handle, JobRef, Request
from launcher.core.status import JobState, Status

NAME = "fleetbench"

SCHEMA = """
CREATE TABLE IF NOT EXISTS sjobs(native_id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL,
    attempt INTEGER NOT NULL, token TEXT NOT NULL, target TEXT NOT NULL, state TEXT NOT NULL,
    submitted REAL NOT NULL, ended REAL, by_pid INTEGER);
CREATE INDEX IF NOT EXISTS sjobs_target ON sjobs(target);
CREATE INDEX IF NOT EXISTS sjobs_token ON sjobs(token);
CREATE INDEX IF NOT EXISTS sjobs_job ON sjobs(job_id);
CREATE TABLE IF NOT EXISTS calls(id INTEGER PRIMARY KEY AUTOINCREMENT, target TEXT NOT NULL, pid INTEGER NOT NULL,
    t0 REAL NOT NULL, t_read REAL NOT NULL, cpu_s REAL NOT NULL, n INTEGER NOT NULL, jobs TEXT NOT NULL);
"""


def connect(path) -> sqlite3.Connection:
    """The scheduler file, shared by the driver and every watcher (WAL, waits for a writer)."""
    db = sqlite3.connect(str(path), timeout=60.0, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA busy_timeout=60000")
    return db


def create(path) -> None:
    db = connect(path)
    db.executescript(SCHEMA)
    db.close()


class FleetOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    db: str  # the scheduler file
    latency_ms: float = 0.0  # how long a status call takes to answer
    submit_latency_ms: float = 0.0  # how long a call about one job takes (a submission, a dedupe lookup)


def token_of(job_id: str, attempt: int) -> str:
    return f"launcher:{job_id}:{attempt}"  # JobRef.dedupe_token's form (it travels in the scheduler's fields)


class FleetBackend:
    name: ClassVar[str] = NAME
    target_options: ClassVar = FleetOptions
    install_hint: ClassVar[str] = "bench/fleet_plugin on PYTHONPATH (bench/fleet.py does it)"

    def __init__(self, target, app=None):
        self.target = target
        self.app = app
        self._db: Optional[sqlite3.Connection] = None

    @property
    def opts(self) -> FleetOptions:
        o = self.target.options
        return o if isinstance(o, FleetOptions) else FleetOptions(**{k: v for k, v in dict(self.target.raw).items()
                                                                     if k != "backend"})

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = connect(self.opts.db)
        return self._db

    def probe(self) -> Facts:
        return Facts(self.target.name, self.name, {"scheduler": "fleet bench stand-in"})

    def render(self, spec, facts: Facts, job: JobRef) -> Request:
        return Request(backend=self.name, target=self.target.name, job=job, text=f"# {job.dedupe_token}\n")

    def _one_job_call(self) -> None:
        if self.opts.submit_latency_ms > 0:  # sbatch, or squeue --name for one token
            time.sleep(self.opts.submit_latency_ms / 1000.0)

    def submit(self, request: Request) -> Handle:
        self._one_job_call()
        job = request.job
        cur = self.db.execute("INSERT INTO sjobs(job_id,attempt,token,target,state,submitted,by_pid) "
                              "VALUES(?,?,?,?,?,?,?)", (job.job_id, job.attempt, job.dedupe_token, self.target.name,
                                                        "RUNNING", time.time(), os.getpid()))
        return Handle(self.name, self.target.name, job.job_id, str(cur.lastrowid), job.attempt)

    def status(self, handles) -> list:
        handles = list(handles)
        t0 = time.time()
        if self.opts.latency_ms > 0:
            time.sleep(self.opts.latency_ms / 1000.0)
        cpu = time.process_time()
        t_read = time.time()
        rows = {str(n): (s, sub, end) for n, s, sub, end in self.db.execute(
            "SELECT native_id,state,submitted,ended FROM sjobs WHERE target=?", (self.target.name,))}
        out = []
        for h in handles:
            row = rows.get(h.native_id)
            if row is None:
                out.append(Status(JobState.UNKNOWN, reason="no such job"))
                continue
            state, sub, end = row
            out.append(Status(JobState(state), native_state=state.lower(), reason=state.lower() if end else "",
                              exit_code=0 if state == "COMPLETED" else None, start_time=sub, end_time=end))
        jobs = ",".join(h.job_id for h in handles)
        cpu = time.process_time() - cpu
        self.db.execute("INSERT INTO calls(target,pid,t0,t_read,cpu_s,n,jobs) VALUES(?,?,?,?,?,?,?)",
                        (self.target.name, os.getpid(), t0, t_read, cpu, len(handles), jobs))
        return out

    def cancel(self, handle: Handle) -> None:
        self.db.execute("UPDATE sjobs SET state='CANCELLED', ended=? WHERE native_id=? AND ended IS NULL",
                        (time.time(), int(handle.native_id)))

    def cancel_many(self, handles) -> dict:
        for h in handles:
            self.cancel(h)
        return {}

    def logs(self, handle: Handle, follow: bool = False, done=None):
        yield ""

    def find(self, job: JobRef) -> Optional[Handle]:
        self._one_job_call()
        row = self.db.execute("SELECT native_id FROM sjobs WHERE token=? AND state<>'CANCELLED' "
                              "ORDER BY native_id LIMIT 1", (job.dedupe_token,)).fetchone()
        return None if row is None else Handle(self.name, self.target.name, job.job_id, str(row[0]), job.attempt)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def plugin_dir() -> Path:
    return Path(__file__).resolve().parent
