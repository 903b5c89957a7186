"""Moving in: a person's SQLite store copied into a team's PostgreSQL store
(``launcher state migrate --to postgresql://...``), without loss and idempotently.

Every table of the schema is copied (the list is read from SCHEMA itself:
``launcher.state.schema.tables``), in one transaction on the server taken like every other
write (``StateStore.tx``: the writers' lock), so a watcher running on the server meanwhile
sees all of it or nothing, and a failure leaves the server as it was.

A row is copied unless the server already has it:

* a table with a key (jobs, sweeps, attempts, claims, provenance; a spot observation of a
  job's attempt): a row whose key the server holds is already there, and is left as the server
  has it (the server is the truth once a person moved in: its watcher may have changed the job
  since);
* a table whose only key is a surrogate id (events; a spot observation of no attempt): rows are
  compared whole, every column but the id, and each is copied as many times as the SQLite store
  has it more than the server. Their ids are the server's own (a team's server numbers the rows
  of everyone); the order of a job's events is kept.

Run twice, the second run copies nothing. ``plan`` counts without writing (``--dry-run``).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from launcher.state.schema import tables
from launcher.state.engines import shown

CHUNK = 500  # values per IN (...) list


@dataclass(frozen=True)
class TableCopy:
    table: str
    in_source: int  # rows in the SQLite store
    present: int  # of those, already on the server
    copied: int  # copied now (0 in a dry run)

    @property
    def to_copy(self) -> int:
        return self.in_source - self.present


def _shape(table: str) -> tuple:
    """(the columns copied: all but a surrogate id, the key that says a row is there, or None)."""
    cols, keys, rowid = tables()[table]
    copied = tuple(c for c in cols if c != rowid)
    natural = [k for k in keys if k != (rowid,)]
    return copied, (natural[0] if natural else None)


def _source_rows(db, table: str, cols: tuple) -> list:
    return [tuple(r) for r in db.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY rowid").fetchall()]


def _chunks(values: list) -> list:
    return [values[i:i + CHUNK] for i in range(0, len(values), CHUNK)]


def _present_keys(db, table: str, key: tuple, rows: list, cols: tuple) -> set:
    """The keys among ROWS' that TABLE on the server already holds."""
    at = [cols.index(k) for k in key]
    wanted = sorted({tuple(r[i] for i in at) for r in rows}, key=repr)
    first = key[0]
    out = set()
    for chunk in _chunks(sorted({w[0] for w in wanted}, key=repr)):
        q = f"SELECT {', '.join(key)} FROM {table} WHERE {first} IN ({','.join('?' * len(chunk))})"
        out.update(tuple(r) for r in db.execute(q, chunk).fetchall())
    return out


def _present_rows(db, table: str, cols: tuple, rows: list) -> Counter:
    """How many times the server holds each of ROWS (compared whole), read by job id."""
    if "job_id" not in cols:
        return Counter(tuple(r) for r in db.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall())
    at = cols.index("job_id")
    ids = sorted({r[at] for r in rows if r[at] is not None})
    out: Counter = Counter()
    for chunk in _chunks(ids):
        q = f"SELECT {', '.join(cols)} FROM {table} WHERE job_id IN ({','.join('?' * len(chunk))})"
        out.update(tuple(r) for r in db.execute(q, chunk).fetchall())
    if any(r[at] is None for r in rows):
        out.update(tuple(r) for r in db.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE job_id IS NULL")
                   .fetchall())
    return out


def _missing(target_db, table: str, rows: list) -> tuple:
    """(the rows of ROWS the server lacks, in their order; the keyed ones among them)."""
    cols, key = _shape(table)
    if key is None:
        keyed, whole = [], rows
    else:  # a row with a NULL in its key has no key (NULLs never conflict): compared whole
        at = [cols.index(k) for k in key]
        keyed = [r for r in rows if all(r[i] is not None for i in at)]
        whole = [r for r in rows if any(r[i] is None for i in at)]
    out_keyed = []
    if keyed:
        there = _present_keys(target_db, table, key, keyed, cols)
        out_keyed = [r for r in keyed if tuple(r[i] for i in at) not in there]
    out_whole = []
    if whole:
        there = _present_rows(target_db, table, cols, whole)
        for r in whole:
            if there[r] > 0:
                there[r] -= 1
            else:
                out_whole.append(r)
    return out_keyed, out_whole


def plan(source, target) -> list:
    """[TableCopy] of every table: what ``copy`` would copy from store SOURCE into TARGET (no write)."""
    out = []
    for table in tables():
        rows = _source_rows(source.db, table, _shape(table)[0])
        keyed, whole = _missing(target.db, table, rows)
        out.append(TableCopy(table, len(rows), len(rows) - len(keyed) - len(whole), 0))
    return out


def copy(source, target) -> list:
    """Copy every row of store SOURCE (SQLite) that TARGET lacks, in ONE write transaction on
    TARGET; [TableCopy] of every table."""
    out = []
    with target.tx() as db:
        for table in tables():  # in SCHEMA's order: a job before its attempts
            cols, key = _shape(table)
            rows = _source_rows(source.db, table, cols)
            keyed, whole = _missing(db, table, rows)
            insert = f"INTO {table}({', '.join(cols)}) VALUES({','.join('?' * len(cols))})"
            if keyed:
                db.executemany(f"INSERT {insert} ON CONFLICT DO NOTHING", keyed)  # (a watcher's row written meanwhile wins)
            if whole:
                db.executemany(f"INSERT {insert}", whole)
            out.append(TableCopy(table, len(rows), len(rows) - len(keyed) - len(whole), len(keyed) + len(whole)))
    mark_moved(source, shown(target.url))  # after the server committed: from now on no launcher acts on SOURCE
    return out


MOVED_TABLE = "launcher_moved"  # in the SQLite store: where `state migrate` moved it (never copied: not in SCHEMA)


def mark_moved(source, url: str) -> None:
    """Record in the SQLite store SOURCE that its jobs now live at URL (shown: no password);
    ``moved_to`` reads it and ``StateStore`` refuses to act on a moved store."""
    with source.tx() as db:
        db.execute(f"CREATE TABLE IF NOT EXISTS {MOVED_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1), "
                   "url TEXT NOT NULL, at REAL NOT NULL)")
        db.execute(f"INSERT INTO {MOVED_TABLE}(id, url, at) VALUES (1, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                   "url=excluded.url, at=excluded.at", (url, time.time()))


def moved_to(db) -> Optional[str]:
    """The URL a SQLite store was moved to by `launcher state migrate`, or None."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MOVED_TABLE,)).fetchone() is None:
        return None
    row = db.execute(f"SELECT url FROM {MOVED_TABLE} WHERE id = 1").fetchone()
    return None if row is None else row[0]


def moved_message(path, url: str) -> str:
    """One line: the store at PATH was moved to URL, and what to do. Pure."""
    return (f"the state store {path} was moved to {url} by `launcher state migrate`: no launcher acts on it any "
            f"more (a watcher still pointed at it would run its jobs a second time); export LAUNCHER_STATE_URL="
            f"'{url}' (or set state_url in the config file) to use the team's store")
