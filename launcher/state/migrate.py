"""Bringing a state store written by an earlier schema up to this one, in place (``open_db``
calls ``migrate`` on every open; a store already up to date costs two PRAGMA reads)."""

from __future__ import annotations

from launcher.state.db import SCHEMA, SCHEMA_VERSION, StoreConnection


def migrate(db: StoreConnection) -> None:
    """Bring a store written by an earlier schema up to this one, in place and in ONE
    transaction (a second process opening it meanwhile waits, then finds it done).

    Schema 2 adds the ``sweeps`` table (a sweep's spec, stored once) and ``jobs.sweep_id``,
    and fills ``sweep_id`` of the element rows an earlier version wrote (their meta names
    the sweep); those rows keep their own ``spec_yaml`` and are read as before."""
    if _has_column(db, "jobs", "sweep_id") and _version(db) >= SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        if not _has_column(db, "jobs", "sweep_id"):
            db.execute("ALTER TABLE jobs ADD COLUMN sweep_id TEXT")
            db.executemany("UPDATE jobs SET sweep_id=? WHERE job_id=?", _old_elements(db))
        for statement in filter(str.strip, SCHEMA.split(";")):  # executescript would COMMIT first
            db.execute(statement)
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _version(db) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def _has_column(db, table: str, column: str) -> bool:
    return any(r[1] == column for r in db.execute(f"PRAGMA table_info({table})").fetchall())


def _old_elements(db) -> list:
    """(sweep id, job id) of the rows whose meta names the sweep they are an element of."""
    import json

    out = []
    for r in db.execute("SELECT job_id, meta FROM jobs WHERE meta LIKE '%\"sweep\"%'").fetchall():
        try:
            sweep = json.loads(r[1] or "{}").get("sweep") or {}
        except ValueError:
            continue
        if isinstance(sweep, dict) and isinstance(sweep.get("id"), str):
            out.append((sweep["id"], r[0]))
    return out
