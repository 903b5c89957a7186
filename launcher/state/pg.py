"""The state store on a PostgreSQL server (psycopg 3): the engine module, the only one that
imports the driver (``launcher.state.engines`` imports it when a store's URL is ``postgresql://``).

``connect(url)`` returns a ``PgConnection``, which keeps the store's connection contract
(``launcher.state.connection.StoreConnection``), as the SQLite store's connection does. The
store's statements are the same text on both engines; what PostgreSQL spells otherwise is spelled
here once (``PostgresEngine``: the schema's types, a substring test; ``begin_write`` /
``begin_jobs``: the locks). Each ``?`` is passed to the driver as its ``%s`` (``placeholders``).
Its failures are the contract's: ``StateStoreFailure`` (one line saying what to do) for the
server, the login or a lock; ``StatementError`` / ``ConstraintError`` for a statement's own.

Writers are serialised as SQLite serialises them, but per job where they may be
(docs/team-store.md, "What the writers' lock serialises"). ``begin_write`` (a write
transaction of the store without named jobs: ``StateStore.tx()``) is ``BEGIN`` plus the
writers' lock whole (the row of ``launcher_writer``, taken through a function no member can
turn into a hostage: ``launcher.state.pglocks``), taken before the transaction reads anything
and released by its COMMIT or ROLLBACK: one writer at a time, each seeing what the previous one
wrote (a sweep's slot accounting, gc, the outbox). A job's own writes (``tx(jobs=...)``:
``begin_jobs``) take that lock shared and then lock their jobs' rows in id order: writes of
different jobs run side by side, two of one job one after the other, and a whole-lock writer
still excludes them all. Readers never wait (MVCC), as under SQLite's WAL.

Each person connects as a role of their own: the migrations install row-level security
(``launcher.state.team``: everyone reads the team's jobs, acts on their own; the watchers' role
on all), stamped in ``launcher_schema.security``, and each connection reads who it is
(``role``, ``acts_on_all``) so the store skips or refuses others' jobs before the server would.

Every session of the launcher sets ``lock_timeout`` (the busy timeout: every wait is bounded)
and ``idle_in_transaction_session_timeout`` (``idle_limit``, below the claim TTL: the server ends
a frozen launcher's transaction, rolling it back whole, and with it every lock it held).

Migrations run under a session's advisory lock, taken before their transaction begins
(``launcher.state.schema.migrate``): two launchers
upgrading one server at once never run a step twice; a wait for it is bounded by
``lock_timeout`` and its error names who holds it. The schema version lives in
the table ``launcher_schema`` (SQLite's ``PRAGMA user_version``).
"""

from __future__ import annotations

import threading
import time
import weakref
from contextlib import contextmanager
from functools import lru_cache
from typing import Optional

import psycopg
from psycopg import errors as pgerrors
from psycopg import pq

from launcher.core import knobs
from launcher.core.errors import StateStoreError
from launcher.state import pglocks, team
from launcher.state import schema as schema_module
from launcher.state.connection import ConstraintError, StatementError
from launcher.state.db import StateStoreFailure, StoreUnreachable, busy_timeout
from launcher.state.schema import POSTGRES_TYPES, render, statements
from launcher.state.engines import shown

APPLICATION = 0x4C4E4348  # "LNCH": the advisory locks' first key (the SQLite file's application_id)
MIGRATE_LOCK = 2  # a migration (1 was the writers' lock before schema 3: launcher.state.pglocks)
# the migration lock is the session's, taken BEFORE its transaction begins: a launcher that waited for
# another's migration then reads the store in a new transaction, which sees every table and stamp the
# other committed (inside one transaction begun before the wait, the catalog may still show the store
# as it was, and the migration would run again, its DDL beside the first launcher's writes: a deadlock)
MIGRATION_LOCK = f"SELECT pg_advisory_lock({APPLICATION}, {MIGRATE_LOCK})"
MIGRATION_UNLOCK = f"SELECT pg_advisory_unlock({APPLICATION}, {MIGRATE_LOCK})"
VERSION_TABLE = "launcher_schema"
VERSION_DDL = (f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (id BIGINT PRIMARY KEY CHECK (id = 1), "
               "application TEXT NOT NULL, version BIGINT NOT NULL)")
CONNECT_TIMEOUT_S = 10
# a transaction's jobs, locked in id order (two transactions never wait for each other's rows in a circle)
LOCK_JOBS = "SELECT job_id FROM jobs WHERE job_id = ANY(%s) ORDER BY job_id FOR UPDATE"
LOCK_JOB_UNLESS_BUSY = "SELECT job_id FROM jobs WHERE job_id = %s FOR UPDATE SKIP LOCKED"
IDLE_LIMIT_S = 10.0  # $LAUNCHER_STATE_IDLE_TIMEOUT: a launcher idle this long inside a transaction is ended


def idle_limit(ttl: float) -> float:
    """Seconds a launcher's session may sit idle inside a transaction before the server ends it
    ($LAUNCHER_STATE_IDLE_TIMEOUT, default the lesser of IDLE_LIMIT_S and a third of the claim
    TTL TTL): always below the TTL, so a frozen launcher holds nothing longer than a claim lasts."""
    limit = knobs.number("LAUNCHER_STATE_IDLE_TIMEOUT", min(IDLE_LIMIT_S, ttl / 3.0), positive=True)
    return min(limit, ttl / 2.0)


def session_settings(busy: float, idle: float) -> list:
    """The statements each launcher session runs first (pure): every lock wait bounded by the busy
    timeout (as SQLite's "locked"), a transaction left idle ended by the server. 0 means no limit
    to PostgreSQL: a busy timeout of 0 waits 1 ms."""
    return [f"SET lock_timeout = {max(1, int(busy * 1000))}",
            f"SET idle_in_transaction_session_timeout = {max(1, int(idle * 1000))}"]


# ---------------------------------------------------------------- rows
class Row(tuple):
    """A row by index (``r[0]``) and by column name (``r["state"]``), and ``dict(r)``: the
    contract's ``StoreRow`` (``launcher.state.connection``). Each column set gets its own subclass (``_row_class``), whose
    ``_index`` maps names and positions alike to positions (one lookup: 10,000 jobs are read
    for a `status`)."""

    __slots__ = ()
    _index: dict = {}
    _names: tuple = ()

    def __getitem__(self, key, _get=tuple.__getitem__):
        try:
            return _get(self, self._index[key])
        except (KeyError, TypeError):  # a slice or a negative index, as a tuple takes them
            if isinstance(key, str):
                raise IndexError(f"No item with that key: {key!r}") from None
            return _get(self, key)

    def keys(self) -> tuple:
        return self._names


@lru_cache(maxsize=1024)
def _row_class(names: tuple) -> type:
    index = {**{i: i for i in range(len(names))}, **{n: i for i, n in enumerate(names)}}
    return type("Row", (Row,), {"__slots__": (), "_index": index, "_names": names})


def _rows(cursor):
    desc = cursor.description
    if desc is None:
        return tuple
    return _row_class(tuple(c.name for c in desc))


# ---------------------------------------------------------------- errors
def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


def connect_failure(url: str, e: BaseException) -> StateStoreFailure:
    """One line for a connection that could not be made: what is wrong and what to do. Pure."""
    where, text = shown(url), _one_line(e)
    low = text.lower()
    if "password authentication failed" in low or "authentication failed" in low or "no password supplied" in low \
            or ("role" in low and "does not exist" in low) or "no pg_hba.conf entry" in low:
        return StateStoreFailure(f"the state store {where} refused the login ({text}); check the user and password "
                                 f"in $LAUNCHER_STATE_URL or state_url (a password may also come from ~/.pgpass)")
    if "database" in low and "does not exist" in low:
        return StateStoreFailure(f"the state store {where}: the database does not exist on the server ({text}); "
                                 f"create it (createdb), or fix the database name in the URL")
    return StoreUnreachable(f"the state store {where} cannot be reached ({text}); check that the server runs and "
                             f"the host and port in $LAUNCHER_STATE_URL or state_url (nothing was written)")


def _mapped(db: "PgConnection", e: psycopg.Error) -> BaseException:
    """A statement's failure as the store's contract names it (``launcher.state.connection``)."""
    where, text = db.path, _one_line(e)
    if isinstance(e, (pgerrors.LockNotAvailable, pgerrors.QueryCanceled)) and "lock" in text.lower():
        return StateStoreFailure(f"the state store {where} is locked by another launcher (waited "
                                 f"{db.timeout:g} s) ({text}); let it finish, or raise LAUNCHER_STATE_BUSY_TIMEOUT")
    if isinstance(e, pgerrors.DiskFull):
        return StateStoreFailure(f"the state store {where} cannot be written: the server's disk is full ({text}); "
                                 f"the store was left as it was")
    if isinstance(e, pgerrors.InsufficientPrivilege) and "row-level security" in text:
        return StateStoreFailure(f"the state store {where} refused the write: it touches a job of another person "
                                 f"(row-level security, docs/team-store.md); nothing was written")
    if isinstance(e, (pgerrors.InsufficientPrivilege, pgerrors.ReadOnlySqlTransaction)):
        return StateStoreFailure(f"the state store {where} may not be written by this role ({text}); ask the "
                                 f"server's administrator, or point $LAUNCHER_STATE_URL at a primary server")
    if "idle-in-transaction timeout" in text.lower():  # (SQLSTATE 25P03, then the connection is closed)
        return StoreUnreachable(f"the state store {where} ended this launcher's transaction: it sat idle inside it "
                                f"longer than $LAUNCHER_STATE_IDLE_TIMEOUT (was the process stopped?) ({text}); the "
                                f"write was rolled back whole")
    if isinstance(e, psycopg.OperationalError) or db.broken:
        return StoreUnreachable(f"the state store {where} cannot be reached ({text}); check that the server runs "
                                 f"(the command's last write, if any, was rolled back whole)")
    kind = ConstraintError if isinstance(e, psycopg.IntegrityError) else StatementError
    return kind(f"the state store {where}: a statement failed ({text})")


@lru_cache(maxsize=4096)
def placeholders(sql: str) -> str:
    """SQL as the driver takes it: each '?' outside quoted text ('...' and "...") as '%s', and a
    literal '%' as '%%' (the store's statements are few: each is converted once)."""
    out, quote = [], None
    for ch in sql:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "?":
            out.append("%s")
            continue
        out.append("%%" if ch == "%" else ch)
    return "".join(out)


@lru_cache(maxsize=4096)
def _writes(sql: str) -> bool:
    return sql.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE")


# ---------------------------------------------------------------- the connection
class PgConnection:
    """The store's connection (``launcher.state.connection.StoreConnection``) on a psycopg
    connection in autocommit: transactions are the store's own BEGIN/COMMIT."""

    def __init__(self, conn: psycopg.Connection, url: str, timeout: float):
        self.conn = conn
        self.url = url
        self.path = shown(url)
        self.timeout = timeout
        self.engine = PostgresEngine()
        self.total_changes = 0  # rows inserted, updated or deleted through this connection
        self.role: str = ""  # the connecting role (current_user): the owner of the jobs it creates
        self.acts_on_all = True  # a watcher, the tables' owner, a superuser (launcher.state.team)
        self.begin_whole = ""  # BEGIN and the writers' lock (connect: launcher.state.pglocks)
        self.begin_shared = ""  # BEGIN and the writers' lock shared (a job's own writes: ``begin_jobs``)
        self.since = None  # monotonic start of the statement in flight, if any (``Watchdog``)
        self.limits = (0.0, 0.0)  # (idle, hold) seconds: who counts as a hostage (launcher.state.pglocks)

    def execute(self, sql: str, parameters=()):
        return self._run(placeholders(sql), tuple(parameters))

    def begin_write(self) -> None:
        """BEGIN with the writers' lock whole: no other writer until COMMIT or ROLLBACK."""
        self.begin(self.begin_whole)

    def begin(self, statements: str):
        """BEGIN and take a lock; a lock not granted (timeout, server gone) leaves no transaction
        open, as a failed BEGIN IMMEDIATE leaves none on SQLite."""
        try:
            return self._run(statements, None)
        except BaseException:
            if self.in_transaction:
                self._run("ROLLBACK", None)
            raise

    def begin_jobs(self, job_ids: list) -> None:
        """BEGIN a transaction that writes the jobs JOB_IDS (sorted): the writers' lock shared, then
        the jobs' rows locked in that order (``StateStore.tx``; a job not there yet locks nothing:
        its INSERT is its own). Nothing is left open when a lock is not granted."""
        self.begin(self.begin_shared)
        if not job_ids:
            return
        try:
            self._run(LOCK_JOBS, (job_ids,))
        except BaseException:
            if self.in_transaction:
                self._run("ROLLBACK", None)
            raise

    def lock_job_unless_busy(self, job_id: str) -> bool:
        """Inside a transaction: lock JOB_ID's row unless another session holds it (True when
        locked; False when it is busy, or gone)."""
        return self._run(LOCK_JOB_UNLESS_BUSY, (job_id,)).fetchone() is not None

    def executemany(self, sql: str, parameters):
        rows = [tuple(p) for p in parameters]
        if not rows:
            return None
        self.since = time.monotonic()
        try:
            cur = self.conn.cursor()
            cur.executemany(placeholders(sql), rows)
            self._count(sql, cur)
            return cur
        except psycopg.Error as e:
            raise _mapped(self, e) from e
        finally:
            self.since = None

    def _run(self, sql: str, parameters):
        self.since = time.monotonic()  # (the watchdog's: a statement waiting long on a lock)
        try:
            cur = self.conn.execute(sql, parameters)
        except psycopg.Error as e:
            raise _mapped(self, e) from e
        finally:
            self.since = None
        self._count(sql, cur)
        return cur

    def _count(self, sql: str, cur) -> None:
        if cur.rowcount > 0 and _writes(sql):
            self.total_changes += cur.rowcount

    @property
    def in_transaction(self) -> bool:
        return not self.broken and self.conn.info.transaction_status != pq.TransactionStatus.IDLE

    @property
    def broken(self) -> bool:
        """The server went away (restarted, connection dropped): the store opens a new one."""
        return self.conn.closed or self.conn.broken

    def commit(self) -> None:
        if self.in_transaction:
            self.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class Watchdog:
    """One daemon thread per process that, while a statement of one of its sessions has waited
    longer than the idle limit (on a table or row lock taken by a session outside the writers'
    lock: a person's own ``LOCK TABLE``), ends the sessions sitting on the store's locks
    (``launcher_end_hostages``, launcher.state.pglocks) from a connection of its own. The
    writers' lock needs no help: its waiters do this themselves between their slices."""

    def __init__(self):
        self.conns: weakref.WeakSet = weakref.WeakSet()
        self.lock = threading.Lock()
        self.thread: Optional[threading.Thread] = None

    def watch(self, db: "PgConnection") -> None:
        with self.lock:
            self.conns.add(db)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="launcher-pg-watchdog", daemon=True)
                self.thread.start()

    def _run(self) -> None:
        own: dict = {}  # url -> a psycopg connection of the watchdog's own
        while True:
            with self.lock:
                conns = list(self.conns)
            tick = min([c.limits[0] for c in conns if c.limits[0] > 0] or [IDLE_LIMIT_S]) / 2.0
            time.sleep(max(0.2, tick))
            for c in conns:
                since, (idle, hold) = c.since, c.limits
                if since is None or idle <= 0 or time.monotonic() - since < idle:
                    continue
                try:
                    if c.url not in own or own[c.url].closed or own[c.url].broken:
                        own[c.url] = psycopg.connect(c.url, autocommit=True, application_name="launcher watchdog",
                                                     connect_timeout=CONNECT_TIMEOUT_S)
                    own[c.url].execute("SELECT launcher_end_hostages(%s, %s)", (idle, hold))
                except psycopg.Error:
                    pass  # an older store, the server away: the statement's own lock_timeout still bounds it


WATCHDOG = Watchdog()


class PostgresEngine:
    """How ``launcher.state.schema.migrate`` reads, stamps and locks a PostgreSQL store."""

    name = "postgresql"
    types = POSTGRES_TYPES
    contains = "strpos({column}, ?) > 0"  # (SQL) COLUMN holds the text bound to the '?'
    overtaken_from = "jobs"  # (SQL) where the marked cancelled rows are read from: its planner picks the index

    @staticmethod
    def columns(db, table: str) -> list:
        rows = db.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                          "AND table_name = ? ORDER BY ordinal_position", (table,)).fetchall()
        return [r[0] for r in rows]

    @staticmethod
    def version(db):
        """The store's schema version, or None when it has none yet (a new database)."""
        if db.execute("SELECT to_regclass(?)", (VERSION_TABLE,)).fetchone()[0] is None:
            return None
        row = db.execute(f"SELECT version FROM {VERSION_TABLE} WHERE id = 1").fetchone()
        return None if row is None else int(row[0])

    def current(self, db) -> bool:
        """At this schema version, with this version's row-level security (``security``: a
        column an older launcher neither reads nor needs: its writes fill ``owner`` by default)."""
        v = self.version(db)
        if v is not None and v > schema_module.SCHEMA_VERSION:
            raise newer(db, v)
        if v != schema_module.SCHEMA_VERSION:
            return False
        row = db.execute(f"SELECT * FROM {VERSION_TABLE} WHERE id = 1").fetchone()
        return "security" in row.keys() and int(row["security"]) >= team.SECURITY_VERSION

    @staticmethod
    def set_version(db, version: int) -> None:
        db.execute(VERSION_DDL)
        db.execute(f"ALTER TABLE {VERSION_TABLE} ADD COLUMN IF NOT EXISTS security BIGINT NOT NULL DEFAULT 0")
        db.execute(f"INSERT INTO {VERSION_TABLE}(id, application, version, security) VALUES(1, 'launcher', ?, ?) "
                   "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, security = EXCLUDED.security",
                   (int(version), team.SECURITY_VERSION))

    @staticmethod
    def finish(db) -> None:
        """After the tables: each person's jobs their own (row-level security, ``launcher.state.team``),
        run as written (PostgreSQL's own SQL, with no parameters)."""
        db.execute(VERSION_DDL)  # granted to the team below
        schema = db.execute("SELECT current_schema()").fetchone()[0]
        for statement in (*team.statements(schema), *pglocks.statements(schema)):
            db._run(statement, None)

    @staticmethod
    def schema() -> list:
        return statements(render(POSTGRES_TYPES))

    @staticmethod
    @contextmanager
    def migration(db):
        try:
            db._run(MIGRATION_LOCK, None)
        except StateStoreFailure as e:
            if "locked" not in str(e):
                raise
            raise StateStoreFailure(f"the state store {db.path} is being migrated by another session, which holds "
                                    f"its migration lock: {migration_holder(db)} (waited {db.timeout:g} s); let it "
                                    f"finish, or end that session") from None
        try:
            db._run("BEGIN", None)  # after the lock: this transaction sees what an earlier migration committed
            try:
                yield
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        finally:
            if not db.broken:  # (a dropped session released its lock with it)
                db._run(MIGRATION_UNLOCK, None)


def migration_holder(db) -> str:
    """Who holds the migration lock (an advisory lock: pg_locks names its session to everyone)."""
    try:
        row = db.execute("SELECT a.pid, a.usename, a.application_name, a.state FROM pg_locks l "
                         "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                         "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                         f"AND l.classid = {APPLICATION} AND l.objid = {MIGRATE_LOCK} AND l.objsubid = 2").fetchone()
    except StateStoreError:
        return "a session that could not be named"
    if row is None:
        return "no one now"
    return f"role {row[1]} (pid {row[0]}, application {row[2]!r}, {row[3] or 'state hidden'})"


def newer(db, version: int) -> StateStoreFailure:
    return StateStoreFailure(f"the state store {db.path} has schema version {version}, written by a newer launcher "
                             f"(this one knows {schema_module.SCHEMA_VERSION}): upgrade launcher")


def _check_identity(db: PgConnection) -> None:
    """Refuse a database that holds tables but is not a launcher store (before anything is written)."""
    if db.engine.version(db) is not None:
        return
    tables = {r[0] for r in db.execute("SELECT table_name FROM information_schema.tables "
                                       "WHERE table_schema = current_schema()").fetchall()}
    if tables and "jobs" not in tables:
        raise StateStoreFailure(f"{db.path} is not a launcher state store (its schema holds other tables: "
                                f"{', '.join(sorted(tables)[:5])}); it was left as it is: point $LAUNCHER_STATE_URL "
                                f"at a database (or a schema, ?options=-csearch_path=...) of the launcher's own")


def connect_options(url: str, application: str) -> dict:
    """psycopg.connect's options for a launcher session to URL: autocommit, APPLICATION named,
    and $LAUNCHER_STATE_CONNECT_TIMEOUT unless the URL sets its own connect_timeout."""
    options = {"autocommit": True, "application_name": application}
    if "connect_timeout" not in url:
        options["connect_timeout"] = knobs.whole("LAUNCHER_STATE_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S, positive=True,
                                                 what="seconds")
    return options


def connect(url: str, read_only: bool = False) -> PgConnection:
    """Connect, check the store, and migrate it (under the migration lock) when it is older or new.
    READ_ONLY (``launcher serve``: ``launcher.state.readonly``): the session refuses every write
    (``default_transaction_read_only``), and the store is read as it is, never created or migrated
    (``db.version`` None: no store yet); a newer schema is refused as always."""
    timeout = busy_timeout()
    ttl = knobs.claim_ttl()
    idle = idle_limit(ttl)
    try:
        conn = psycopg.connect(url, **connect_options(url, "launcher"), row_factory=_rows)
    except psycopg.Error as e:
        raise connect_failure(url, e) from None
    except ValueError as e:  # psycopg's own checks of a malformed URL
        raise StateStoreFailure(f"the state store URL {shown(url)} cannot be used: {_one_line(e)}") from None
    db = PgConnection(conn, url, timeout)
    db.begin_whole = pglocks.begin_write(timeout, idle, ttl)
    db.begin_shared = pglocks.begin_write(timeout, idle, ttl, shared=True)
    db.limits = (idle, ttl)
    try:
        # a lock held longer than the busy timeout fails as SQLite's does ("locked"); a frozen launcher's
        # transaction is ended by the server (every lock it held released) before its claims expire
        for statement in session_settings(timeout, idle):
            db.execute(statement)
        _check_identity(db)
        if read_only:
            db.execute("SET default_transaction_read_only = on")
            db.version = db.engine.version(db)
            if db.version is not None and db.version > schema_module.SCHEMA_VERSION:
                raise newer(db, db.version)
            return db
        schema_module.migrate(db)
        db.role, acts = db.execute(team.WHO).fetchone()
        db.acts_on_all = bool(acts)
        WATCHDOG.watch(db)
    except BaseException:
        db.close()
        raise
    return db


class Listener:
    """A watcher's wait between passes on a PostgreSQL store (``launcher.state.wakeups``): a
    connection of its own that LISTENs on CHANNEL. ``wait`` returns early, True, when
    a launch or a cancel committed; a connection that fails is dropped (the wait is then a plain
    sleep) and opened again at the next wait: a wake-up is never needed for correctness, the
    interval's pass comes anyway."""

    MIN_GAP_S = 0.5  # woken again within this of the last wake-up: the rest of it is slept first

    def __init__(self, url: str, channel: str):
        self.url, self.channel = url, channel
        self.conn = None
        self.woken_at = 0.0

    def wait(self, timeout: float) -> bool:
        """Up to TIMEOUT seconds, until a notification (True) or the time is out (False)."""
        end = time.monotonic() + max(0.0, timeout)
        try:
            if self.conn is None or self.conn.closed:
                self.conn = psycopg.connect(self.url, **connect_options(self.url, "launcher watch (listen)"))
                self.conn.execute(f"LISTEN {self.channel}")
            gap = self.woken_at + self.MIN_GAP_S - time.monotonic()
            if gap > 0:  # a burst of launches wakes one pass, not one per launch
                time.sleep(min(gap, max(0.0, end - time.monotonic())))
            woken = any(True for _ in self.conn.notifies(timeout=max(0.0, end - time.monotonic()), stop_after=1))
            if woken:
                for _ in self.conn.notifies(timeout=0.01):  # the others of the same burst
                    pass
                self.woken_at = time.monotonic()
            return woken
        except psycopg.Error:
            self.close()
            time.sleep(max(0.0, end - time.monotonic()))
            return False

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg.Error:
                pass
            self.conn = None

