"""Job state in SQLite (WAL) under ``$LAUNCHER_HOME``.

Three tables (schema: ``launcher.state.db``): ``jobs`` (one row per launched spec),
``attempts`` (one row per submission or restart: native id, state, reason, resume step,
cost) and ``events`` (every decision with its reason). Secrets never reach this file: the
spec stores secret *names* only, and ``record_event`` redacts known patterns. Recovery's
own state rides in ``jobs.meta`` as plain JSON (``launcher.state.rows``). A sweep's spec
is stored once, in ``sweeps``, and its elements' job rows refer to it (``launcher.state.sweeps``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Iterator, Optional

from launcher.core import faults
from launcher.core.args import job_ref
from launcher.core.errors import LauncherError, StateStoreError
from launcher.core.redact import redact_obj
from launcher.core.status import FINAL_STATES, OPEN_STATES, attempt_ended, is_final, job_state_for
from launcher.state import observations, provenance as provenance_rows, wakeups
from launcher.state.actors import event_dict
from launcher.state.bulk import BulkStore, chunks
from launcher.state.connection import StatementError, StoreConnection
from launcher.state.copy import moved_message, moved_to
from launcher.state.db import StateStoreFailure, open_db, prepare_home
from launcher.state.engines import missing_driver, shown, state_url
from launcher.state.history import HistoryStore
from launcher.state.rows import (ATTEMPT_REPLACED, AttemptRow, JobRow, claim_available, closed_meta, is_open,
                                 mirrored_state, patched, reopened)
from launcher.state.schema import SCHEMA
from launcher.state.team import HOMES_TABLE, not_yours
from launcher.state.sweeps import SweepStore, job_rows

# a claim taken or renewed (one row per job or name: whoever held it before, it is this owner's now)
CLAIM_TAKEN = ("INSERT INTO claims(job_id,owner,expires,taken) VALUES(?,?,?,?) ON CONFLICT (job_id) DO UPDATE SET "
               "owner=excluded.owner, expires=excluded.expires, taken=excluded.taken")




def new_owner() -> str:
    """A claim owner: host:pid:random (the random part tells two stores of one process apart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class ClaimLost(LauncherError):
    """Another watcher took this job's claim over (ours expired) while we acted on it."""


class NotYours(LauncherError):
    """The job belongs to another person of the team (a PostgreSQL store's row-level security:
    ``launcher.state.team``): this role may read it, not act on it."""


class AttemptTaken(ClaimLost):
    """The attempt is already recorded with another native id: a second submission of it
    (made by a holder whose claim lapsed) is never recorded over the first."""

    def __init__(self, message: str, recorded_native: str):
        super().__init__(message)
        self.recorded_native = recorded_native


@dataclass
class Claim:
    """A job claimed by one owner until ``expires``, with the job and its attempts as read in the
    same transaction that took the claim: a watch's decision reads this view and nothing else of
    the store (``claim(view=True)`` adds the attempts already observed for the planner and the
    jobs on the same checkpoint root). RELEASED: the claim was given back by the last write made
    under it (``close_job`` / ``record_submission`` with ``release=True``), in that write's own
    transaction; ``launcher.state.claims.claimed`` then has nothing left to release."""

    owner: str
    expires: float
    job: JobRow
    attempts: list
    observed: frozenset = frozenset()  # (view) attempts whose spot observation is recorded
    sharing: tuple = ()  # (view) the JobRows on the job's checkpoint root, oldest first
    released: bool = False


class StateStore:
    """The state store of one $LAUNCHER_HOME. Usable from several threads: each thread gets a
    connection of its own (``threading.local``), opened on its first use, so each thread's
    transactions (``tx``, ``batch``) are its own and SQLite's locking orders them, exactly as
    between processes. A single connection behind a lock would not do: a thread's statements
    would land inside another thread's open transaction. Each thread also has its own claim
    owner, so two threads sharing a store never both hold one job's claim. ``close`` closes
    every thread's connection (they are opened with ``check_same_thread=False`` for that
    alone; each is only ever used by its own thread)."""

    def __init__(self, home: Path, url: Optional[str] = None, moved_ok: bool = False):
        """The store of HOME: its SQLite file ``HOME/state.db``, or, with URL (default:
        ``$LAUNCHER_STATE_URL``; ``launcher.state.engines``), a PostgreSQL server's database.
        HOME keeps the jobs' local files (``job_dir``) either way."""

        self.home = Path(home)
        self.url = state_url() if url is None else url
        self.path = shown(self.url) if self.url else self.home / "state.db"  # what messages name
        if not self.url:
            prepare_home(self.home, self.path)
        self._local = threading.local()
        self._conns: list = []
        self._conns_lock = threading.Lock()
        self.sweeps = SweepStore(self)  # a sweep's rows (launcher.state.sweeps)
        self.bulk = BulkStore(self)  # many jobs' attempts at once (launcher.state.bulk)
        self.history = HistoryStore(self)  # ended jobs removed by `launcher gc` (launcher.state.history)
        _ = self.db  # opened now, in the creating thread: a damaged store fails here, before anything else
        if not self.url and not moved_ok:  # moved by `launcher state migrate`: refused (MOVED_OK: the copy itself)

            where = moved_to(self.db)
            if where:
                self.close()
                raise StateStoreFailure(moved_message(self.path, where))
        if self.url:
            prepare_home(self.home, self.home / "jobs")  # the jobs' local files, once the server answered

    @property
    def db(self) -> StoreConnection:
        """This thread's connection (opened on its first use; on PostgreSQL, opened again
        after the server dropped it: the failed transaction was rolled back whole)."""
        c = getattr(self._local, "db", None)
        if c is not None and getattr(c, "broken", False) and not self._batch_depth:
            with self._conns_lock:
                self._conns = [x for x in self._conns if x is not c]
            c.close()
            c = None
        if c is None:
            c = self._connect()
            with self._conns_lock:
                self._conns.append(c)
            self._local.db = c
        return c

    def _connect(self):
        if self.url:
            try:
                from launcher.state import pg  # the driver (psycopg) loads only for a PostgreSQL store
            except ImportError as e:

                raise StateStoreFailure(missing_driver(self.url, e)) from None
            return pg.connect(self.url)  # unreachable, refused, newer schema: one line (StateStoreError)

        # never re-initialises an existing file; damaged, read-only, locked or full: StateStoreError
        c = open_db(self.path, SCHEMA, shared=True)
        c.executescript(SCHEMA)
        return c

    @property
    def _batch_depth(self) -> int:  # per thread: one thread's batch is not another's
        return getattr(self._local, "batch_depth", 0)

    @_batch_depth.setter
    def _batch_depth(self, depth: int) -> None:
        self._local.batch_depth = depth

    @property
    def unreadable(self) -> dict:
        """Rows this thread's last listing left out (``readable_rows``)."""
        return getattr(self._local, "unreadable", {})

    @unreadable.setter
    def unreadable(self, rows: dict) -> None:
        self._local.unreadable = rows

    def close(self):
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()
        self._local = threading.local()

    @contextmanager
    def tx(self, jobs: Optional[Iterable[str]] = None) -> Iterator[StoreConnection]:
        """One write transaction; inside ``batch()`` a savepoint of the batch's transaction, so a
        write that fails is undone alone, exactly as its own transaction would have been.

        JOBS names the jobs whose rows the transaction reads to decide what it writes. It then
        writes only rows of those jobs (jobs, attempts, claims, homes), rows no transaction
        reads to decide a write (events, observations), or rows it changes by one statement
        each that decides by itself (an upsert, a compare-and-swap UPDATE ... WHERE; JOBS
        empty). On SQLite every write transaction excludes the others (BEGIN IMMEDIATE), and
        JOBS changes nothing. On PostgreSQL, a transaction with JOBS takes the writers' lock
        shared and then locks JOBS' rows, in id order (``launcher.state.pglocks``): writes of
        different jobs run side by side, two of one job one after the other, each seeing what
        the previous one wrote. Without JOBS (a sweep's slot accounting, gc, the outbox) it
        takes the writers' lock whole: no other writer at all, as on SQLite."""
        nested = self._batch_depth  # (a batch's transaction holds the writers' lock whole)
        db = self.db
        if nested:
            db.execute("SAVEPOINT launcher_write")
        elif jobs is not None:
            db.begin_jobs(sorted(set(jobs)))
        else:
            db.begin_write()
        try:
            yield db
            db.execute("RELEASE launcher_write" if nested else "COMMIT")
        except BaseException:
            if db.in_transaction:  # a failed COMMIT (disk full) may have rolled back already
                for sql in (("ROLLBACK TO launcher_write", "RELEASE launcher_write") if nested else ("ROLLBACK",)):
                    db.execute(sql)
            raise

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Several writes (each its own ``tx()``) committed as ONE transaction: one lock and
        one commit instead of one per write. Only for writes that may become visible together
        (never a write that must be durable before a later step, like a launch's SUBMITTING
        row before the scheduler is called). Nested batches join the outer one."""
        depth = getattr(self, "_batch_depth", 0)
        with (nullcontext() if depth else self.tx()):
            self._batch_depth = depth + 1
            try:
                yield
            finally:
                self._batch_depth = depth

    def job_dir(self, job_id: str) -> Path:
        """The job's local folder: under this store's home; on a team's store, the folder under
        the home the job was launched from (recorded at launch: ``HOMES_TABLE``) when this process
        reaches it, so watchers with homes of their own (``$LAUNCHER_HOME``) share one folder per
        job. A launching home this process cannot reach is said once, as a ``job_dir_elsewhere``
        event and a warning, and the job's files go on under this home (split between the two)."""
        d = self.home / "jobs" / job_id
        if self.url and not d.exists():
            d = self._launched_dir(job_id) or d
        d.mkdir(parents=True, exist_ok=True)
        return d

    def record_homes(self, db, job_ids) -> None:
        """On a team's store, inside the launch's own transaction: JOB_IDS' folders are under this
        store's home (``HOMES_TABLE``, read by ``job_dir`` of watchers with other homes)."""
        if self.url:
            home = str(self.home.resolve())
            db.executemany(f"INSERT INTO {HOMES_TABLE}(job_id, home) VALUES(?, ?) ON CONFLICT (job_id) "
                           "DO UPDATE SET home = EXCLUDED.home", [(j, home) for j in job_ids])

    def _launched_dir(self, job_id: str) -> Optional[Path]:
        try:
            row = self.db.execute(f"SELECT home FROM {HOMES_TABLE} WHERE job_id=?", (job_id,)).fetchone()
        except StatementError:  # a store from before the table (its next migration makes it)
            return None
        home = row[0] if row is not None else None
        if not home or Path(home) == self.home.resolve():
            return None
        theirs = Path(home) / "jobs" / job_id
        if os.access(theirs, os.W_OK | os.X_OK):
            return theirs
        said = getattr(self._local, "said_elsewhere", set())
        if job_id not in said:
            said.add(job_id)
            self._local.said_elsewhere = said
            mine = self.home / "jobs" / job_id
            self.record_event(job_id, "job_dir_elsewhere", launched_from=str(theirs), using=str(mine),
                              message=f"job {job_id}'s folder {theirs} (its launching $LAUNCHER_HOME) cannot be "
                                      f"reached from here; its files go on under {mine}, split between the two "
                                      f"(give the watchers one shared $LAUNCHER_HOME: docs/team-store.md)")
            print(f"warning: job {job_id}'s folder {theirs} cannot be reached from this $LAUNCHER_HOME; using "
                  f"{mine} (its files are split: docs/team-store.md)", file=sys.stderr)
        return None

    # ---- jobs
    def begin_job(self, job_id, name, target, backend, spec_path, spec_yaml, ckpt_root=None, meta=None):
        now, sweep_id = time.time(), ((meta or {}).get("sweep") or {}).get("id")
        with self.tx(jobs=[job_id]) as db:
            db.execute(
                "INSERT INTO jobs(job_id,name,target,backend,spec_path,spec_yaml,created,updated,state,ckpt_root,meta,"
                "sweep_id) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                (job_id, name, target, backend, spec_path, spec_yaml, now, now, "SUBMITTING", ckpt_root,
                 json.dumps(meta or {}), sweep_id))
            self.record_homes(db, [job_id])
            wakeups.announce(self, db)  # a team's watchers: a new job (its launch may die before recording it)

    def forget_job(self, job_id: str) -> None:
        """Remove a job whose submission failed: nothing is recorded as submitted."""
        with self.tx(jobs=[job_id]) as db:
            db.execute("DELETE FROM attempts WHERE job_id=?", (job_id,))
            db.execute("DELETE FROM events WHERE job_id=?", (job_id,))
            db.execute("DELETE FROM jobs WHERE job_id=?", (job_id,))
            if self.url:
                db.execute(f"DELETE FROM {HOMES_TABLE} WHERE job_id=?", (job_id,))

    # ---- whose jobs: on a team's PostgreSQL store, each person acts on their own (launcher.state.team)
    def may_act(self, job) -> bool:
        """Whether this store's role may change, cancel or resubmit JOB (a ``JobRow`` or a row of
        the jobs table): always on SQLite; on PostgreSQL, its own jobs, or every job for a
        watcher (the server enforces the same rule with row-level security)."""
        owner = _owner_of(job)
        db = self.db
        return owner is None or getattr(db, "acts_on_all", True) or owner == db.role

    def check_may_act(self, job, verb: str = "change") -> None:
        """NotYours (one line) unless this role may act on JOB."""
        if not self.may_act(job):
            raise NotYours(not_yours(job.job_id if isinstance(job, JobRow) else job["job_id"], _owner_of(job), verb))

    def _may_act_name(self, db, name: str) -> bool:
        """Whether this role may take the claim of NAME (a sweep's): the server's own rule."""
        if getattr(db, "acts_on_all", True):
            return True
        return bool(db.execute("SELECT launcher_may_act(?)", (name,)).fetchone()[0])

    # ---- claims: decide -> submit -> record happens for one job in one place at a time
    @property
    def owner(self) -> str:
        """This store's claim owner in this thread (threads differ, whether they share a store
        or have their own)."""
        o = getattr(self._local, "owner", None)
        if o is None:
            o = self._local.owner = new_owner()
        return o

    def claim(self, job_id: str, ttl: float = 120.0, owner: Optional[str] = None,
              now: Optional[float] = None, wait: bool = True, recovery: Optional[dict] = None,
              view: bool = False) -> Optional[Claim]:
        """Take the job's claim for ``ttl`` seconds, reading the job and its attempts in the
        same write transaction, under the job's row lock. None when another owner holds an
        unexpired claim (or the job is gone). An expired claim is taken over. WAIT False (a
        watch pass): on PostgreSQL, None at once, too, while another session is writing the job
        (``FOR UPDATE SKIP LOCKED``): watchers passing over the same jobs spread out over them
        instead of queueing on each one, and the job is decided by whoever is on it.
        RECOVERY: meta keys to change with the claim (``save_recovery``'s CHANGES: what a status
        read means for the job), written in the claim's transaction and read back in its view.
        VIEW: also read what a watch's decision reads (``Claim.observed``, ``Claim.sharing``)."""
        owner = owner or self.owner
        now = time.time() if now is None else now
        skipping = not wait and bool(self.url)
        with self.tx(jobs=() if skipping else [job_id]) as db:
            if skipping and not db.lock_job_unless_busy(job_id):
                return None
            row = db.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if row is None:
                return None
            self.check_may_act(row)
            c = db.execute("SELECT owner, expires FROM claims WHERE job_id=?", (job_id,)).fetchone()
            if c is not None and not claim_available(c["owner"], c["expires"], owner, now):
                return None
            db.execute(CLAIM_TAKEN, (job_id, owner, now + ttl, now))
            job = job_rows(db, [row])[0]
            if recovery:
                meta = patched(job.meta, recovery)
                db.execute("UPDATE jobs SET meta=?, updated=? WHERE job_id=?", (json.dumps(meta), now, job_id))
                job = replace(job, meta=meta, updated=now)
            claim = Claim(owner, now + ttl, job, self._attempts(db, job_id))
            if view:
                claim.observed = frozenset(observations.observed_in(db, job_id))
                if job.ckpt_root:
                    claim.sharing = tuple(self._sharing_root(db, job.ckpt_root))
        return claim

    def claim_name(self, name: str, ttl: float, owner: Optional[str] = None) -> Optional[str]:
        """Take (or renew) the claim of NAME, which is not a job (a sweep's: ``sweep:<id>``), for
        TTL seconds: the owner, or None when another owner holds an unexpired one."""
        owner, now = owner or self.owner, time.time()
        with self.tx() as db:
            if not self._may_act_name(db, name):  # another person's sweep: never ours to act on
                return None
            c = db.execute("SELECT owner, expires FROM claims WHERE job_id=?", (name,)).fetchone()
            if c is not None and not claim_available(c["owner"], c["expires"], owner, now):
                return None
            db.execute(CLAIM_TAKEN, (name, owner, now + ttl, now))
        return owner

    def release(self, job_id: str, owner: Optional[str] = None) -> None:
        with self.tx(jobs=[job_id]) as db:
            db.execute("DELETE FROM claims WHERE job_id=? AND owner=?", (job_id, owner or self.owner))

    def claim_holder(self, job_id: str) -> Optional[tuple]:
        r = self.db.execute("SELECT owner, expires FROM claims WHERE job_id=?", (job_id,)).fetchone()
        return (r["owner"], r["expires"]) if r else None

    def _check_claim(self, db, job_id: str, owner: Optional[str], release: bool = False) -> None:
        """Inside a write of JOB_ID: OWNER (when given) still holds its claim (else ClaimLost);
        RELEASE: the claim is given back by this transaction (undone with it, if it fails)."""
        if owner is None:
            return
        c = db.execute("SELECT owner FROM claims WHERE job_id=?", (job_id,)).fetchone()
        if c is None or c["owner"] != owner:
            raise ClaimLost(f"job {job_id}: the recovery claim was taken over by {c['owner'] if c else 'nobody'}"
                            f" while {owner} held it; not recording (the new holder finds the submission by "
                            "its dedupe token)")
        if release:
            db.execute("DELETE FROM claims WHERE job_id=? AND owner=?", (job_id, owner))

    def close_job(self, job_id: str, state: str, reason: str, owner: Optional[str] = None,
                  event: Optional[str] = None, detail: Optional[dict] = None, release: bool = False) -> None:
        """Close a job (state must be final) and record why, in one transaction (RELEASE: giving
        OWNER's claim back in it)."""
        if not is_final(state):
            raise ValueError(f"close_job: {state} is not a final state ({', '.join(sorted(FINAL_STATES))})")
        now = time.time()
        with self.tx(jobs=[job_id]) as db:
            self._check_claim(db, job_id, owner, release)
            meta = self._meta(db, job_id)
            meta = closed_meta(meta)
            db.execute("UPDATE jobs SET state=?, reason=?, meta=?, updated=? WHERE job_id=?",
                       (state, reason, json.dumps(meta), now, job_id))
            if event:
                db.execute("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)",
                           (job_id, now, event, json.dumps(redact_obj(detail or {}), default=str)))
            wakeups.announce(self, db)  # a team's watchers: a cancel, a close (its notifications, a sweep's slot)

    def add_restart(self, job_id, attempt, target, handle_json, native_id, state, reason) -> bool:
        """Record a restart in place (same native id) unless another watcher already did."""
        now = time.time()
        with self.tx(jobs=[job_id]) as db:
            if db.execute("SELECT 1 FROM attempts WHERE job_id=? AND attempt=?", (job_id, attempt)).fetchone():
                return False
            db.execute("INSERT INTO attempts(job_id,attempt,target,native_id,handle,submitted,state,reason,meta)"
                       " VALUES(?,?,?,?,?,?,?,?,?)",
                       (job_id, attempt, target, native_id, handle_json, now, state, reason, "{}"))
            db.execute("UPDATE jobs SET handle=?, state=?, updated=? WHERE job_id=? AND state NOT IN "
                       f"({','.join('?' * len(FINAL_STATES))})",
                       (handle_json, job_state_for(state), now, job_id, *sorted(FINAL_STATES)))
        return True

    def mirror_state(self, job_id: str, handle_json: str, state: str, reason: str) -> bool:
        """An open job shows its current attempt's state; a closed one keeps the state of the
        decision that closed it, and a stale status (of an attempt already superseded by a
        newer submission) changes nothing. An attempt that COMPLETED (or was CANCELLED) closes
        the job, recorded once as a "done" event, except during a burst race, which decides
        first which copy won. True when this call closed the job."""
        now = time.time()
        with self.tx(jobs=[job_id]) as db:
            row = db.execute("SELECT state, handle, meta FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            new = mirrored_state(row, handle_json, state)
            if new is None:
                return False
            db.execute("UPDATE jobs SET state=?, reason=?, updated=? WHERE job_id=?", (new, reason, now, job_id))
            if is_final(new):
                db.execute("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)",
                           (job_id, now, "done", json.dumps({"reason": new.lower()})))
                return True
        return False

    def record_attempt(self, job_id, attempt, target, handle_json, native_id, state="PENDING",
                       reason="", resume_step=None, meta=None, owner: Optional[str] = None):
        self.record_submission(job_id, attempt, target, handle_json, native_id, state=state, reason=reason,
                               resume_step=resume_step, meta=meta, owner=owner)

    def replace_attempt(self, job_id: str, attempt: int, was: str, target: str, handle_json: str, native_id: str,
                        reason: str, owner: Optional[str] = None, events=()) -> None:
        """ATTEMPT of JOB_ID is the submission NATIVE_ID, not WAS as recorded: a second
        submission of the attempt started first and holds its start claim, while the recorded
        one stood down (``launcher.jobside.startclaim``). A compare-and-swap on (job, attempt,
        WAS, claim OWNER), with EVENTS and the job row pointing at it, in one transaction:
        AttemptTaken when the attempt is no longer recorded as WAS. The attempt is RUNNING (its
        start is claimed); the next status call says how it goes on."""
        now = time.time()
        rows = [_event_row(job_id, kind, detail, now) for kind, detail in events]
        with self.tx(jobs=[job_id]) as db:
            self._check_claim(db, job_id, owner)
            had = db.execute("SELECT native_id FROM attempts WHERE job_id=? AND attempt=?",
                             (job_id, attempt)).fetchone()
            if had is None or had["native_id"] != was:
                raise AttemptTaken(f"job {job_id}: attempt {attempt} is recorded as id "
                                   f"{had['native_id'] if had else 'nothing'}, not {was}; not replacing it with "
                                   f"id {native_id}", had["native_id"] if had else "")
            db.execute("UPDATE attempts SET target=?, native_id=?, handle=?, state='RUNNING', reason=?, "
                       "native_state='', exit_code=NULL, ended=NULL WHERE job_id=? AND attempt=?",
                       (target, native_id, handle_json, reason, job_id, attempt))
            latest = db.execute("SELECT MAX(attempt) AS n FROM attempts WHERE job_id=?", (job_id,)).fetchone()
            job = db.execute("SELECT state FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if latest["n"] == attempt and job is not None and not is_final(job["state"]):
                db.execute("UPDATE jobs SET handle=?, state='RUNNING', target=?, updated=? WHERE job_id=?",
                           (handle_json, target, now, job_id))
            if rows:
                db.executemany("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)", rows)

    def record_submission(self, job_id, attempt, target, handle_json, native_id, state="PENDING",
                          reason="", resume_step=None, meta=None, owner: Optional[str] = None,
                          events=(), provenance: Optional[tuple] = None, recovery: Optional[dict] = None,
                          job_reason: Optional[str] = None, release: bool = False) -> bool:
        """A submission's attempt, the job row pointing at it, ``record_event(kind, **detail)``
        for each (kind, detail) of EVENTS, and the run's PROVENANCE record ((location, record
        text): ``launcher.state.provenance``), in ONE transaction: a compare-and-swap on (job,
        attempt, claim owner). While OWNER is given, only while its claim on the job holds
        (ClaimLost); an attempt already recorded with another native id is never overwritten
        (AttemptTaken). False when the job was cancelled while this submission was under way:
        the attempt is recorded (its handle is what the caller now cancels) and the job stays
        CANCELLED; True otherwise. RECOVERY: the meta keys recovery changed with this submission
        (``save_recovery``'s CHANGES) and JOB_REASON the job's reason, written in the same
        transaction (a watcher's resubmission: its attempt counter moves with its record).
        RELEASE: OWNER's claim is given back in the same transaction (its last write)."""
        now = time.time()
        rows = [_event_row(job_id, kind, detail, now) for kind, detail in events]  # redacted before the lock
        with self.tx(jobs=[job_id]) as db:
            self._check_claim(db, job_id, owner, release)
            had = db.execute("SELECT native_id FROM attempts WHERE job_id=? AND attempt=?",
                             (job_id, attempt)).fetchone()
            if had is not None and had["native_id"] and had["native_id"] != native_id:
                raise AttemptTaken(f"job {job_id}: attempt {attempt} is already recorded as id "
                                   f"{had['native_id']}; not recording id {native_id} over it",
                                   had["native_id"])
            faults.point("during_record")
            db.execute(
                "INSERT INTO attempts(job_id,attempt,target,native_id,handle,submitted,state,reason,resume_step,meta) "
                "VALUES(?,?,?,?,?,?,?,?,?,?) " + ATTEMPT_REPLACED,
                (job_id, attempt, target, native_id, handle_json, now, state, reason, resume_step,
                 json.dumps(meta or {})))
            job = db.execute("SELECT state, meta FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if job is not None and job["state"] == "CANCELLED":
                # cancel won over this launch: the job stays CANCELLED; the caller cancels what it submitted
                if rows:
                    db.executemany("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)", rows)
                return False
            # a recorded submission is the truth: it reopens a job closed meanwhile (a launch
            # slower than the SUBMITTING grace); every other writer holds the job's claim
            meta_text = reopened({job_id: job["meta"]} if job else {}).get(job_id)
            if recovery and job is not None:
                meta_text = json.dumps(patched(json.loads(meta_text or job["meta"] or "{}"), recovery))
            sets = "handle=?, state=?, target=?, updated=?" + (", meta=?" if meta_text else "")
            values = [handle_json, job_state_for(state), target, now] + ([meta_text] if meta_text else [])
            if job_reason is not None:
                sets += ", reason=?"
                values.append(job_reason)
            db.execute(f"UPDATE jobs SET {sets} WHERE job_id=?", (*values, job_id))
            if rows:
                db.executemany("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)", rows)
            if provenance is not None:
                location, text = provenance
                db.execute(provenance_rows.INSERT, (job_id, now, location, text))
            wakeups.announce(self, db)  # a team's watchers: a job submitted
        return True

    def claim_left(self, job_id: str, owner: str, now: Optional[float] = None) -> float:
        """Seconds OWNER's claim of JOB_ID still holds (0 when it is gone or another's): the
        fence a submission checks right before it calls the scheduler."""
        now = time.time() if now is None else now
        r = self.db.execute("SELECT owner, expires FROM claims WHERE job_id=?", (job_id,)).fetchone()
        if r is None or r["owner"] != owner:
            return 0.0
        return max(0.0, float(r["expires"]) - now)

    def mark_submit_unknown(self, job_ids: list, reason: str) -> None:
        """JOB_IDS' rows, still SUBMITTING, had a submission whose outcome is unknown (REASON):
        kept SUBMITTING for ``status``/``watch`` to settle by the dedupe token, with the
        outcome noted in their meta (``submit_unknown``) and an event each, in one transaction."""
        now = time.time()
        with self.tx(jobs=job_ids) as db:
            for j in job_ids:
                row = db.execute("SELECT meta, state FROM jobs WHERE job_id=?", (j,)).fetchone()
                if row is None or row["state"] != "SUBMITTING":
                    continue
                meta = patched(json.loads(row["meta"] or "{}"), {"submit_unknown": {"at": now, "reason": reason}})
                db.execute("UPDATE jobs SET meta=?, reason=?, updated=? WHERE job_id=?",
                           (json.dumps(meta), f"submission outcome unknown: {reason}", now, j))
                db.execute("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)",
                           _event_row(j, "submit_outcome_unknown", {"reason": reason}, now))

    def set_waiting(self, job_ids: list, state: str, reason: str, event: str) -> None:
        """Rows still SUBMITTING become STATE (QUEUED: waiting for a slot the launcher keeps),
        in one transaction, each with an EVENT naming REASON."""
        now = time.time()
        with self.tx(jobs=job_ids) as db:
            db.executemany("UPDATE jobs SET state=?, reason=?, updated=? WHERE job_id=? AND state='SUBMITTING'",
                           [(state, reason, now, j) for j in job_ids])
            db.executemany("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)",
                           [(j, now, event, json.dumps({"reason": reason})) for j in job_ids])

    def update_attempt(self, job_id, attempt, **fields):
        """Set FIELDS of one attempt row. An attempt the launcher itself ends (a cancel, a stop, a
        lost burst race, a deadline move: a final ``state`` without ``ended``) is ended now
        unless it already has an end: every view then sees it ended, with no status call (a
        closed job is not refreshed again)."""
        if not fields:
            return
        if "meta" in fields and isinstance(fields["meta"], dict):
            fields["meta"] = json.dumps(fields["meta"])
        cols = ", ".join(f"{k}=?" for k in fields)
        values = list(fields.values())
        if attempt_ended(str(fields.get("state") or "")) and "ended" not in fields:
            cols += ", ended=COALESCE(ended, ?)"
            values.append(time.time())
        with self.tx(jobs=[job_id]) as db:
            db.execute(f"UPDATE attempts SET {cols} WHERE job_id=? AND attempt=?", (*values, job_id, attempt))

    def write_progress(self, job_id: str, last_step: Optional[int], attempts=(), events=()) -> None:
        """A progress read's writes in one transaction: the job's LAST_STEP (None: unchanged),
        ATTEMPTS ((attempt number, {column: value}) each: ``launcher.recovery.progress``) and
        EVENTS ((kind, {detail}) each: an in-job restart's)."""
        now = time.time()
        with self.tx(jobs=[job_id]) as db:
            for kind, detail in events:
                db.execute("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)",
                           _event_row(job_id, kind, detail, now))
            if last_step is not None:
                db.execute("UPDATE jobs SET last_step=?, updated=? WHERE job_id=?", (last_step, time.time(), job_id))
            for attempt, fields in attempts:
                fields = {k: json.dumps(v) if k == "meta" else v for k, v in fields.items()}
                db.execute(f"UPDATE attempts SET {', '.join(f'{k}=?' for k in fields)} WHERE job_id=? AND attempt=?",
                           (*fields.values(), job_id, attempt))

    def update_job(self, job_id, **fields):
        if "meta" in fields and isinstance(fields["meta"], dict):
            fields["meta"] = json.dumps(fields["meta"])
        fields["updated"] = time.time()
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.tx(jobs=[job_id]) as db:
            db.execute(f"UPDATE jobs SET {cols} WHERE job_id=?", (*fields.values(), job_id))

    def patch_meta(self, job_id: str, **changes) -> None:
        """Set (or, with None, remove) some meta keys atomically: other keys written meanwhile
        by another watcher (a burst race, a scheduled retry) are kept."""
        self._patch(job_id, changes, {})

    def save_recovery(self, job_id: str, changes: dict, **fields) -> None:
        """Store what recovery changed in the job's meta (CHANGES: {key: new value, or None to
        remove it}) and FIELDS of the job row in one transaction; meta keys another watcher
        wrote meanwhile are kept."""
        self._patch(job_id, changes, fields)

    def _patch(self, job_id: str, changes: dict, fields: dict) -> None:
        if not changes and not fields:
            return
        with self.tx(jobs=[job_id]) as db:
            row = db.execute("SELECT meta FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if row is None:
                return
            fields = {**fields, "meta": json.dumps(patched(json.loads(row["meta"] or "{}"), changes)),
                      "updated": time.time()}
            db.execute(f"UPDATE jobs SET {', '.join(f'{k}=?' for k in fields)} WHERE job_id=?",
                       (*fields.values(), job_id))

    @staticmethod
    def _meta(db, job_id: str) -> dict:
        row = db.execute("SELECT meta FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        return json.loads(row["meta"] or "{}") if row else {}

    def get_job(self, job_id: str) -> JobRow:
        """The job JOB_ID names: its exact id, or else a prefix matching exactly one job. A
        plain prefix (``substr``): '%' and '_' are characters, not LIKE wildcards; an empty or
        blank id is refused (ArgumentError), never read as the prefix of every job."""
        job_id = job_ref(job_id)
        row = self.db.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if row is None:
            rows = self.db.execute("SELECT * FROM jobs WHERE substr(job_id, 1, ?) = ? ORDER BY created DESC "
                                   "LIMIT 11", (len(job_id), job_id)).fetchall()
            if len(rows) == 1:
                row = rows[0]
            elif len(rows) > 1:
                more = ", ..." if len(rows) > 10 else ""
                raise LauncherError(f"job id '{job_id}' is ambiguous, it begins the ids of "
                                    + ", ".join(r["job_id"] for r in rows[:10]) + more
                                    + ": give more of the id")
            else:
                raise LauncherError(f"no job '{job_id}' in {self.path} (see `launcher status`)")
        got = self.readable_rows([row])
        if not got:
            raise StateStoreError(f"the state store {self.path}: job {row['job_id']}: "
                                  f"{self.unreadable[row['job_id']][1]}; it was left as it is")
        return got[0]

    def list_jobs(self, active_only: bool = False, limit: int = 1000) -> list[JobRow]:
        """The newest LIMIT jobs; a row whose meta cannot be read is left out and named in
        ``unreadable`` (``readable_rows``)."""
        q = "SELECT * FROM jobs ORDER BY created DESC LIMIT ?"
        rows = self.readable_rows(self.db.execute(q, (limit,)).fetchall())
        return [r for r in rows if is_open(r)] if active_only else rows

    def readable_rows(self, rows) -> list[JobRow]:
        """``JobRow``s of the jobs table's ROWS. A row whose meta is not a JSON object is left
        out, and ``self.unreadable`` (job id -> (state column, why)) names it until the next
        read: one damaged row never stops a listing of the others (watch records an event
        for it and goes on, ``launcher.recovery.watch.cycle``)."""
        self.unreadable = {}
        try:
            out = job_rows(self.db, rows)
            if all(isinstance(r.meta, dict) for r in out):
                return out
        except ValueError:  # json.JSONDecodeError: read the rows one by one to find which
            pass
        out = []
        for r in rows:
            try:
                got = job_rows(self.db, [r])[0]
            except ValueError as e:
                self.unreadable[r["job_id"]] = (r["state"], f"its meta is not valid JSON ({e})")
                continue
            if not isinstance(got.meta, dict):
                self.unreadable[r["job_id"]] = (r["state"], f"its meta is not a JSON object (a JSON "
                                                            f"{type(got.meta).__name__})")
                continue
            out.append(got)
        return out

    def jobs_by_id(self, job_ids) -> dict:
        """{job id: JobRow} of JOB_IDS as they are now (exact ids; one query per ``bulk.CHUNK``):
        a job gone, or whose meta cannot be read (the next listing names it), is left out."""
        out = {}
        for chunk in chunks(list(dict.fromkeys(job_ids))):
            rows = self.db.execute(f"SELECT * FROM jobs WHERE job_id IN ({','.join('?' * len(chunk))})",
                                   chunk).fetchall()
            for r in rows:
                try:
                    got = job_rows(self.db, [r])[0]
                except ValueError:
                    continue
                if isinstance(got.meta, dict):
                    out[got.job_id] = got
        return out

    def attempts(self, job_id: str) -> list[AttemptRow]:
        return self._attempts(self.db, job_id)

    @staticmethod
    def _attempts(db, job_id: str) -> list[AttemptRow]:
        rows = db.execute("SELECT * FROM attempts WHERE job_id=? ORDER BY attempt", (job_id,)).fetchall()
        return [AttemptRow(**{**dict(r), "meta": json.loads(r["meta"] or "{}")}) for r in rows]

    def open_jobs(self, limit: int = 100000) -> list[JobRow]:
        """The open jobs this role acts on (every one, but on a team's store: its own, or all for
        a watcher: ``may_act``)."""
        opened = sorted(OPEN_STATES)
        q = f"SELECT * FROM jobs WHERE state IN ({','.join('?' * len(opened))}) ORDER BY created DESC LIMIT ?"
        rows = self.readable_rows(self.db.execute(q, (*opened, limit)).fetchall())
        return [j for j in rows if is_open(j) and self.may_act(j)]

    def watch_rows(self) -> list[JobRow]:
        """What a watch pass reads, newest first: every open job (``OPEN_STATES``, by the
        jobs_state index), and the cancelled rows whose meta names ``OVERTAKEN_KEY`` (a
        submission still unsettled when the job was cancelled, ``launcher.recovery.cancel``: by
        the jobs_overtaken partial index, asked in its own words). Other closed jobs are not
        read: a pass costs what is open, not the store's history. Unreadable rows: as ``list_jobs``."""
        opened = sorted(OPEN_STATES)
        q = (f"SELECT * FROM jobs WHERE state IN ({','.join('?' * len(opened))}) UNION ALL "
             f"SELECT * FROM {self.db.engine.overtaken_from} WHERE {self.db.engine.types['OVERTAKEN_ROWS']} "
             "ORDER BY created DESC")
        return self.readable_rows(self.db.execute(q, opened).fetchall())

    def unreadable_open(self) -> dict:
        """{job id: why} of the rows the last listing left out whose state is not final."""
        return {j: why for j, (state, why) in self.unreadable.items() if not is_final(state)}

    @staticmethod
    def _sharing_root(db, ckpt_root: str) -> list[JobRow]:
        return job_rows(db, db.execute("SELECT * FROM jobs WHERE ckpt_root=? ORDER BY created", (ckpt_root,)).fetchall())

    def latest_attempt(self, job_id: str) -> Optional[AttemptRow]:
        a = self.attempts(job_id)
        return a[-1] if a else None

    # ---- events
    def record_event(self, job_id: str, kind: str, **detail) -> None:
        row = _event_row(job_id, kind, detail, time.time())
        with self.tx(jobs=()) as db:  # an event is added, never read to decide a write
            db.execute("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)", row)

    def last_event(self, job_id: str) -> Optional[dict]:
        """The job's latest event ({"ts", "kind", **detail}), or None."""
        r = self.db.execute("SELECT * FROM events WHERE job_id=? ORDER BY id DESC LIMIT 1", (job_id,)).fetchone()
        return None if r is None else event_dict(r)

    def events(self, job_id: str) -> list[dict]:
        rows = self.db.execute("SELECT * FROM events WHERE job_id=? ORDER BY id", (job_id,)).fetchall()
        return [event_dict(r) for r in rows]  # with who wrote each (launcher.state.actors)


def _owner_of(job) -> Optional[str]:
    """The owner of JOB (a ``JobRow`` or a jobs row): None on SQLite, which has no owner column."""
    if isinstance(job, JobRow):
        return job.owner
    return job["owner"] if "owner" in job.keys() else None


def _event_row(job_id: str, kind: str, detail: dict, ts: float) -> tuple:
    """An events row: DETAIL redacted (known secret values and shapes never reach the store)."""
    return (job_id, ts, kind, json.dumps(redact_obj(detail), default=str))


def new_job_id(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:24] or "job"
    return f"{slug}-{secrets.token_hex(3)}"
