"""Opening the state store's SQLite file, and turning SQLite's failures into errors a user can act on.

Rules (README, "When the state store is damaged"):

* A store is created only where no file exists, and atomically: the schema is written to a
  temporary file that is then hard-linked into place, so no process ever sees a
  half-created store, and an existing file (of any size) is never replaced.
* An existing 0-byte ``state.db`` is therefore not "new": it is a store whose contents were
  lost (truncated, or a copy that failed). It is reported, never re-initialised, so the jobs'
  history is not silently replaced by an empty one.
* The file carries ``application_id`` and ``user_version``: a SQLite file that is not a
  launcher store, or one written by a newer schema, is recognised and refused.
* Every SQLite failure that is about the file rather than the query (damaged, read-only,
  locked beyond the busy timeout, disk full, I/O error) becomes a ``StateStoreError``
  naming the path and what to do. Nothing is ever repaired or overwritten.
* Every open runs ``PRAGMA quick_check`` before anything is read or written: a damaged page
  anywhere refuses every command, writes included. Without it a launch whose INSERT happened
  not to touch the damaged page submitted a job and wrote into a store that ``status`` and
  ``watch`` refused (issue 20, §6). quick_check reads every page once (milliseconds for a
  store of thousands of jobs), the price of never writing into a damaged file.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Callable, Optional

from launcher.core import knobs
from launcher.core.errors import StateStoreError
from launcher.core.regular import NotReadable, check_regular
from launcher.state import actors
from launcher.state.connection import ConstraintError, StatementError
from launcher.state.schema import SCHEMA_VERSION, SQLITE, migrate

APPLICATION_ID = 0x4C4E4348  # "LNCH"
HEADER = b"SQLite format 3\x00"
DEFAULT_BUSY_TIMEOUT = 30.0



class StateStoreFailure(StateStoreError):
    """The store itself failed (its file damaged, read-only, locked or full; its server away, a lock
    not granted): one line saying what to do, which the CLI prints (``launcher.state.connection``)."""


class StoreUnreachable(StateStoreFailure):
    """The store's server did not answer or dropped the connection (a PostgreSQL server down or
    restarted): the write in flight was rolled back whole, and a later try may succeed
    (``launcher watch`` waits it out: ``launcher.recovery.watch``)."""


def busy_timeout() -> float:
    """Seconds to wait for another process's write lock ($LAUNCHER_STATE_BUSY_TIMEOUT, default 30)."""
    return knobs.number("LAUNCHER_STATE_BUSY_TIMEOUT", DEFAULT_BUSY_TIMEOUT)


# ---------------------------------------------------------------- error mapping (pure)
_KINDS = [  # (SQLite primary result code, words in the message on Python < 3.11, kind)
    ("SQLITE_FULL", ("disk is full",), "full"),
    ("SQLITE_READONLY", ("readonly", "read-only"), "readonly"),
    ("SQLITE_BUSY", ("database is locked", "busy"), "locked"),
    ("SQLITE_LOCKED", ("table is locked",), "locked"),
    ("SQLITE_CORRUPT", ("malformed",), "corrupt"),
    ("SQLITE_NOTADB", ("not a database",), "notadb"),
    ("SQLITE_CANTOPEN", ("unable to open",), "cantopen"),
    ("SQLITE_IOERR", ("disk i/o error",), "ioerr"),
    ("SQLITE_PERM", ("access permission denied",), "readonly"),
]


def failure_kind(exc: BaseException) -> Optional[str]:
    """What an exception says about the store *file*, or None for a query's own error
    (a constraint, a bad statement), which is left to the caller."""
    if not isinstance(exc, sqlite3.Error):
        return None
    name = getattr(exc, "sqlite_errorname", "") or ""
    primary = "_".join(name.split("_")[:2])
    text = str(exc).lower()
    for code, words, kind in _KINDS:
        if primary == code or (not name and any(w in text for w in words)):
            return kind
    return None


def describe_failure(path, kind: str, detail: str = "", timeout: float = DEFAULT_BUSY_TIMEOUT) -> str:
    """One line: what is wrong with the store at PATH and what to do. Pure."""
    p = str(path)
    said = f" ({detail})" if detail else ""
    return {
        "full": f"the state store {p} cannot be written: no space left on its device{said}; free some space "
                f"and run the command again (the store was left as it was)",
        "readonly": f"the state store {p} is read-only for this user{said}; make the file and its folder "
                    f"writable (chmod u+w), or set LAUNCHER_HOME to a store you own",
        "locked": f"the state store {p} is locked by another process (waited {timeout:g} s){said}; "
                  f"let it finish, or raise LAUNCHER_STATE_BUSY_TIMEOUT",
        "corrupt": f"the state store {p} is damaged{said}; it was left as it is: copy it aside and try "
                   f"`sqlite3 {p} .recover`, or restore it from a backup",
        "notadb": f"{p} is not a launcher state store{said}; it was left as it is: move it away, or point "
                  f"LAUNCHER_HOME elsewhere",
        "cantopen": f"the state store {p} cannot be opened{said}; check that its folder exists and is "
                    f"writable, or set LAUNCHER_HOME",
        "ioerr": f"the state store {p} could not be read or written (I/O error){said}; check the disk holding "
                 f"it; the store was left as it was",
    }[kind]


def as_store_error(path, exc: BaseException, timeout: float = DEFAULT_BUSY_TIMEOUT) -> Optional[StateStoreFailure]:
    kind = failure_kind(exc)
    if kind is None:
        return None
    if kind == "ioerr" and _no_space(path):  # a full disk can fail mapping the -shm file before any write
        kind = "full"
    return StateStoreFailure(describe_failure(path, kind, str(exc), timeout))


def _no_space(path) -> bool:
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(str(path))) or ".")
    except OSError:
        return False
    return st.f_bavail == 0 or st.f_favail == 0


def statement_error(path, exc: sqlite3.Error) -> StatementError:
    """A statement's own failure on the SQLite store at PATH, as the store's contract names it."""
    kind = ConstraintError if isinstance(exc, sqlite3.IntegrityError) else StatementError
    return kind(f"the state store {path}: a statement failed ({' '.join(str(exc).split())[:300]})")


def _mapped(fn: Callable, path, timeout):
    try:
        return fn()
    except sqlite3.Error as e:
        raise (as_store_error(path, e, timeout) or statement_error(path, e)) from e


class _Cursor(sqlite3.Cursor):
    def execute(self, *a):
        return _mapped(lambda: super(_Cursor, self).execute(*a), self.connection.path, self.connection.timeout)

    def executemany(self, *a):
        return _mapped(lambda: super(_Cursor, self).executemany(*a), self.connection.path,
                       self.connection.timeout)

    def executescript(self, *a):
        return _mapped(lambda: super(_Cursor, self).executescript(*a), self.connection.path,
                       self.connection.timeout)

    def fetchone(self):
        return _mapped(lambda: super(_Cursor, self).fetchone(), self.connection.path, self.connection.timeout)

    def fetchall(self):
        return _mapped(lambda: super(_Cursor, self).fetchall(), self.connection.path, self.connection.timeout)

    def fetchmany(self, *a):
        return _mapped(lambda: super(_Cursor, self).fetchmany(*a), self.connection.path,
                       self.connection.timeout)


class SQLiteConnection(sqlite3.Connection):
    """A connection to a SQLite store, keeping the store's contract
    (``launcher.state.connection.StoreConnection``): every failure is a StateStoreError naming
    the store, and a write transaction excludes every other writer (``BEGIN IMMEDIATE``)."""

    path = ""
    timeout = DEFAULT_BUSY_TIMEOUT
    engine = SQLITE

    def begin_write(self) -> None:
        self.execute("BEGIN IMMEDIATE")

    def begin_jobs(self, job_ids: list) -> None:
        """SQLite locks the whole file: a job's write excludes every other writer, as any write does."""
        self.begin_write()

    def lock_job_unless_busy(self, job_id: str) -> bool:
        return True  # (inside BEGIN IMMEDIATE no other writer runs: the job is never busy)

    def cursor(self, factory=_Cursor):
        return super().cursor(factory)

    def execute(self, sql, parameters=()):
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql, parameters):
        return self.cursor().executemany(sql, parameters)

    def executescript(self, script):
        return self.cursor().executescript(script)

    def commit(self):
        return _mapped(super().commit, self.path, self.timeout)

    def close(self):
        if self.path and not getattr(self, "_closed", False):
            self._closed = True
            with _OPEN_LOCK:
                _OPEN[self.path] -= 1
        return super().close()


# Store files this process has a connection to ({path: count}). Their header is not read again
# while one is open: closing any descriptor of a file drops every POSIX lock this process
# holds on it, SQLite's own included (another process could then reset the WAL under a
# connection still reading it: it would go on reading an old snapshot).
_OPEN: Counter = Counter()
_OPEN_LOCK = threading.Lock()


# ---------------------------------------------------------------- opening
def open_db(path: Path, schema: str, shared: bool = False) -> SQLiteConnection:
    """Connect to the store at PATH, creating it (with SCHEMA) only where no file exists.
    SHARED: the connection may be closed from another thread than its own (``StateStore``
    gives each thread its own connection and closes them all at once)."""
    path = Path(path)
    timeout = busy_timeout()
    if not path.exists():
        _create(path, schema, timeout)
    with _OPEN_LOCK:
        validated = _OPEN[str(path)] > 0
    if not validated:  # see _OPEN: never while one of this process's connections holds a lock
        check_file(path)
    if not os.access(path, os.R_OK | os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
        # SQLite would open it read-only and fail at the first write, possibly mid-command
        raise StateStoreFailure(describe_failure(path, "readonly"))
    db = _connect(path, timeout, shared)
    try:
        check_intact(db, path)  # before anything is written: a damaged store is refused by every command
        _check_identity(db, path, schema)  # before any pragma that writes: a foreign file stays as it is
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        migrate(db)
        actors.install(db)  # each event this connection writes names this process's user (events.actor)
    except BaseException:
        db.close()
        raise
    return db


def _connect(path: Path, timeout: float, shared: bool = False) -> SQLiteConnection:
    try:
        db = sqlite3.connect(str(path), timeout=timeout, isolation_level=None, factory=SQLiteConnection,
                             check_same_thread=not shared)
    except sqlite3.Error as e:
        raise (as_store_error(path, e, timeout) or StateStoreFailure(f"cannot open the state store {path}: {e}")) \
            from e
    db.path, db.timeout = str(path), timeout
    db.row_factory = sqlite3.Row
    with _OPEN_LOCK:
        _OPEN[db.path] += 1
    return db


def check_file(path: Path) -> None:
    """Refuse a file that cannot be a store: not a regular file (a FIFO would block the open
    forever, a device would be read without end), 0 bytes (contents lost) or not SQLite at
    all. The file (and its -wal and -shm beside it) is stat-ed before anything opens it, and
    opened non-blocking."""
    try:
        for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            if p is path or os.path.lexists(p):
                check_regular(p, "file")
    except NotReadable as e:
        raise StateStoreFailure(describe_failure(path, "notadb", f"{p.name}: {e}")) from None
    except OSError as e:
        kind = "readonly" if isinstance(e, PermissionError) else "cantopen"
        raise StateStoreFailure(describe_failure(path, kind, e.strerror or str(e))) from None
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            head = f.read(len(HEADER))
    except OSError as e:
        kind = "readonly" if isinstance(e, PermissionError) else "cantopen"
        raise StateStoreFailure(describe_failure(path, kind, e.strerror or str(e))) from None
    if not head:
        raise StateStoreFailure(empty_store_message(path))
    if head != HEADER:
        raise StateStoreFailure(describe_failure(path, "notadb", "the file does not begin with a SQLite header"))


def empty_store_message(path: Path) -> str:
    wal = Path(f"{path}-wal")
    wal_size = wal.stat().st_size if wal.exists() else 0
    where = (f"; {wal.name} beside it ({wal_size} bytes) may still hold the latest changes: keep it" if wal_size
             else "")
    return (f"the state store {path} is empty (0 bytes): the jobs' history it held is gone (truncated or "
            f"copied incompletely){where}. It was left as it is: restore it from a backup, or move it away "
            f"(mv {path} {path}.empty) to start a new store")


def check_intact(db: SQLiteConnection, path: Path) -> None:
    """Refuse a store with a damaged page anywhere (``PRAGMA quick_check``), as a read of
    that page would: the same "is damaged" StateStoreError, the file left as it is."""
    rows = [str(r[0]) for r in db.execute("PRAGMA quick_check(3)").fetchall()]
    if rows != ["ok"]:
        lines = [" ".join(line.split()) for r in rows for line in r.splitlines()]
        said = "; ".join(line for line in lines if line and not line.startswith("***"))  # one line
        raise StateStoreFailure(describe_failure(path, "corrupt", f"quick_check: {said}"[:300]))


def _check_identity(db: SQLiteConnection, path: Path, schema: str) -> None:
    app_id = db.execute("PRAGMA application_id").fetchone()[0]
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if app_id == APPLICATION_ID:
        if version > SCHEMA_VERSION:
            raise StateStoreFailure(f"the state store {path} has schema version {version}, written by a newer "
                                    f"launcher (this one knows {SCHEMA_VERSION}): upgrade launcher")
        return
    if app_id != 0:
        raise StateStoreFailure(describe_failure(path, "notadb", f"application_id {app_id:#x}"))
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()}
    if tables and "jobs" not in tables:
        raise StateStoreFailure(describe_failure(path, "notadb", "it has no 'jobs' table"))
    # a store written before the identity stamp (or an empty SQLite file): stamp it (idempotent)
    if not tables:
        db.executescript(schema)
    db.execute(f"PRAGMA application_id={APPLICATION_ID}")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _create(path: Path, schema: str, timeout: float) -> None:
    """Write a complete empty store beside PATH and hard-link it into place (never replacing
    a file another process created meanwhile)."""
    tmp = path.with_name(f".{path.name}.new-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        db = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(schema)
            db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        finally:
            db.close()
        os.chmod(tmp, 0o600)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first: use theirs
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(tmp, path)
    except sqlite3.Error as e:
        raise (as_store_error(path, e, timeout) or
               StateStoreFailure(f"cannot create the state store {path}: {e}")) from e
    except OSError as e:
        kind = ("full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else
                "readonly" if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else "cantopen")
        raise StateStoreFailure(describe_failure(path, kind, e.strerror or str(e))) from e
    finally:
        for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                pass


def prepare_home(home: Path, path: Path) -> None:
    """Create $LAUNCHER_HOME (mode 0700) or say in one line why it cannot be."""
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        kind = ("full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else
                "readonly" if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else "cantopen")
        raise StateStoreFailure(describe_failure(path, kind, f"{e.strerror}: {e.filename}")) from None

