"""The contract between the state store and its two engines: what a connection to a store offers
(``StoreConnection``), what its rows and cursors are, and the errors a statement fails with.

``launcher.state.db.SQLiteConnection`` (a file under ``$LAUNCHER_HOME``) and
``launcher.state.pg.PgConnection`` (a team's PostgreSQL server) both keep it. The store
(``launcher.state.store`` and the modules beside it) is written against it alone:

* **Statements** are the store's plain SQL, the same text on both engines, with ``?`` for each
  parameter. Only a few things are spelled differently per engine, and each engine spells them
  explicitly, once: the schema's column types (``launcher.state.schema``: ``SQLITE_TYPES``,
  ``POSTGRES_TYPES``), a substring test (``engine.contains``), how a write transaction begins
  and what it locks (``begin_write``, ``begin_jobs``, ``lock_job_unless_busy``), and how the
  schema's version is read and stamped (``engine``). Upserts are the standard ``INSERT ... ON
  CONFLICT (key) DO UPDATE / DO NOTHING``, which both engines run as written. PostgreSQL's
  driver takes ``%s`` for a parameter: its connection passes each ``?`` as one (``pg.placeholders``),
  the only change a statement's text goes through.
* **Transactions** are the store's: ``begin_write()`` (or ``begin_jobs``), then ``execute("COMMIT")``
  or ``execute("ROLLBACK")``; savepoints by their SQL names. Outside one, each statement commits alone.
* **Rows** are read by position and by column name, and ``dict(row)`` gives every column.
* **Failures**: a failure of the store itself (a file damaged, read-only or full; a server away; a
  lock not granted in time) is a ``StateStoreFailure`` (``launcher.state.db``) whose one line says
  what to do; a statement's own failure is a ``StatementError``, a broken constraint a
  ``ConstraintError``. Both are ``StateStoreError``: code above the state layer catches that one
  type, whatever the engine. No driver's own error type reaches it.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional, Protocol, Sequence

from launcher.core.errors import StateStoreError


class StatementError(StateStoreError):
    """A statement of the store failed by itself (a missing table in an older store, a bad
    statement): not a failure of the store's file or server."""


class ConstraintError(StatementError):
    """A statement broke a constraint (a key already there, a reference to a row that is not)."""


class StoreRow(Protocol):
    """A row: ``row[0]``, ``row["state"]``, ``row.keys()``, ``dict(row)``."""

    def __getitem__(self, key: Any) -> Any: ...

    def keys(self) -> Sequence[str]: ...


class StoreCursor(Protocol):
    rowcount: int

    def fetchone(self) -> Optional[StoreRow]: ...

    def fetchall(self) -> list: ...

    def __iter__(self) -> Iterator[StoreRow]: ...


class StoreEngine(Protocol):
    """What differs per engine, spelled once by each (``schema.SQLiteEngine``, ``pg.PostgresEngine``)."""

    name: str
    types: dict  # the schema's column types in the engine's words
    contains: str  # "(COLUMN holds the text bound to '?')" as SQL, with {column} to fill
    overtaken_from: str  # the FROM of a read of the jobs_overtaken index's rows (``StateStore.watch_rows``)

    def schema(self) -> list: ...


class StoreConnection(Protocol):
    """One connection to a store (one per thread: ``StateStore.db``)."""

    path: str  # where the store is, as messages name it (a file, or a URL without its password)
    engine: StoreEngine
    total_changes: int  # rows inserted, updated or deleted through this connection so far

    def execute(self, sql: str, parameters: Sequence = ...) -> StoreCursor: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence]) -> Optional[StoreCursor]: ...

    def begin_write(self) -> None:
        """Begin a write transaction that excludes every other writer (``StateStore.tx()``)."""

    def begin_jobs(self, job_ids: list) -> None:
        """Begin a write transaction of the jobs JOB_IDS (sorted): on PostgreSQL it excludes only
        writers of those jobs and whole-store writers; on SQLite, every writer."""

    def lock_job_unless_busy(self, job_id: str) -> bool:
        """Inside a transaction: lock JOB_ID's row unless another session holds it (False then)."""

    @property
    def in_transaction(self) -> bool: ...

    def close(self) -> None: ...
