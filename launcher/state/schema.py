"""The state store's schema, and bringing a store written by an earlier schema up to this one,
in place (``launcher.state.db.open_db`` calls ``migrate`` on every open; a store already up to
date costs two PRAGMA reads)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from functools import lru_cache
from string import Template

# 2: the sweeps table, and jobs.sweep_id (``migrate``); 3: PostgreSQL's writers' lock
# (launcher.state.pglocks; the launchers before it took an advisory lock: they refuse a store at 3);
# 4: the watchers table (each `launcher watch`'s last pass: launcher.state.watchers); 5: the
# watch_marks table (what a watcher last acted on per job: launcher.state.marks) and the
# target_polls table (one poller per target: launcher.state.polls); 6: events.actor (who wrote each
# event: the role on PostgreSQL, the OS user on SQLite: launcher.state.actors); 7: the node_blames and
# node_quarantine tables (bad nodes remembered, for the whole store: launcher.state.nodes); 8: the
# jobs_overtaken partial index (the cancelled jobs whose submission is unsettled, read by every watch pass)
SCHEMA_VERSION = 8

# the tables (``launcher.state.store`` reads and writes them); created with the file, and again
# (IF NOT EXISTS) on every open, once ``migrate`` has brought an older store's tables up to it
# (statements are split at ';' for the migration's one transaction: no ';' inside a comment).
# Written once for both engines: a column's type is named by $TEXT, $INTEGER, $REAL or $SERIAL
# (an integer key the engine numbers), which each engine spells its own way (``*_TYPES`` below)
# bad nodes remembered (launcher.state.nodes): each blame of a node by an attempt that failed on it
# (one per node, job and attempt), and the nodes quarantined on a target until EXPIRES
NODES_TEMPLATE = """
CREATE TABLE IF NOT EXISTS node_blames (
  id      $SERIAL,
  target  $TEXT NOT NULL,
  node    $TEXT NOT NULL,
  ts      $REAL NOT NULL,
  job_id  $TEXT NOT NULL,
  attempt $INTEGER NOT NULL,
  why     $TEXT NOT NULL DEFAULT '',
  UNIQUE (target, node, job_id, attempt)
);
CREATE INDEX IF NOT EXISTS node_blames_node ON node_blames(target, node, ts);
CREATE TABLE IF NOT EXISTS node_quarantine (
  target  $TEXT NOT NULL,
  node    $TEXT NOT NULL,
  since   $REAL NOT NULL,
  expires $REAL NOT NULL,
  blames  $INTEGER NOT NULL,
  reason  $TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (target, node)
);
"""

SCHEMA_TEMPLATE = """
CREATE TABLE IF NOT EXISTS jobs (
  job_id     $TEXT PRIMARY KEY,
  name       $TEXT NOT NULL,
  target     $TEXT NOT NULL,
  backend    $TEXT NOT NULL,
  spec_path  $TEXT,
  spec_yaml  $TEXT NOT NULL,
  created    $REAL NOT NULL,
  updated    $REAL NOT NULL,
  state      $TEXT NOT NULL,
  reason     $TEXT NOT NULL DEFAULT '',
  handle     $TEXT,
  ckpt_root  $TEXT,
  last_step  $INTEGER,
  meta       $TEXT NOT NULL DEFAULT '{}',
  sweep_id   $TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE INDEX IF NOT EXISTS jobs_sweep ON jobs(sweep_id);
CREATE INDEX IF NOT EXISTS jobs_overtaken ON jobs(created) WHERE $OVERTAKEN_ROWS;
CREATE TABLE IF NOT EXISTS sweeps (
  sweep_id   $TEXT PRIMARY KEY,
  name       $TEXT NOT NULL,
  spec_path  $TEXT,
  spec_yaml  $TEXT NOT NULL,
  size       $INTEGER NOT NULL,
  created    $REAL NOT NULL,
  meta       $TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS attempts (
  job_id       $TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
  attempt      $INTEGER NOT NULL,
  target       $TEXT NOT NULL,
  native_id    $TEXT,
  handle       $TEXT,
  submitted    $REAL NOT NULL,
  state        $TEXT NOT NULL,
  reason       $TEXT NOT NULL DEFAULT '',
  native_state $TEXT NOT NULL DEFAULT '',
  exit_code    $INTEGER,
  started      $REAL,
  ended        $REAL,
  resume_step  $INTEGER,
  cost_usd     $REAL,
  meta         $TEXT NOT NULL DEFAULT '{}',
  PRIMARY KEY (job_id, attempt)
);
CREATE TABLE IF NOT EXISTS events (
  id      $SERIAL,
  job_id  $TEXT NOT NULL,
  ts      $REAL NOT NULL,
  kind    $TEXT NOT NULL,
  detail  $TEXT NOT NULL DEFAULT '{}',
  actor   $TEXT
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id, id);
CREATE TABLE IF NOT EXISTS claims (
  job_id   $TEXT PRIMARY KEY,
  owner    $TEXT NOT NULL,
  expires  $REAL NOT NULL,
  taken    $REAL NOT NULL
);

-- spot capacity seen, for the planner (launcher.state.observations)
CREATE TABLE IF NOT EXISTS spot_observations (
  id            $SERIAL,
  cloud         $TEXT NOT NULL,
  region        $TEXT NOT NULL DEFAULT '',
  zone          $TEXT NOT NULL DEFAULT '',
  instance_type $TEXT NOT NULL DEFAULT '',
  spot          $INTEGER NOT NULL,
  node_hours    $REAL NOT NULL,
  events        $INTEGER NOT NULL,
  kind          $TEXT NOT NULL,
  ts            $REAL NOT NULL,
  job_id        $TEXT,
  attempt       $INTEGER,
  UNIQUE (job_id, attempt)
);
CREATE INDEX IF NOT EXISTS spot_observations_ts ON spot_observations(ts);

-- notifications decided by `launcher watch`, delivered from here (launcher.state.outbox):
-- one row per (job, event), so an event is decided once whatever the number of watchers
CREATE TABLE IF NOT EXISTS notifications (
  id          $SERIAL,
  job_id      $TEXT NOT NULL,
  event       $TEXT NOT NULL,
  final       $INTEGER NOT NULL DEFAULT 0,
  created     $REAL NOT NULL,
  state       $TEXT NOT NULL,
  sink        $TEXT NOT NULL DEFAULT '{}',
  payload     $TEXT NOT NULL DEFAULT '{}',
  tries       $INTEGER NOT NULL DEFAULT 0,
  max_tries   $INTEGER NOT NULL DEFAULT 8,
  next_try    $REAL NOT NULL DEFAULT 0,
  lease_owner $TEXT,
  lease_until $REAL,
  delivered   $REAL,
  last_error  $TEXT NOT NULL DEFAULT '',
  UNIQUE (job_id, event)
);
CREATE INDEX IF NOT EXISTS notifications_due ON notifications(state, next_try);

-- what produced each run (launcher.state.provenance, the document made by launcher.provenance)
CREATE TABLE IF NOT EXISTS provenance (
  job_id   $TEXT PRIMARY KEY,
  created  $REAL NOT NULL,
  location $TEXT,
  record   $TEXT NOT NULL
);

-- each `launcher watch` process's heartbeat, one row upserted per pass (launcher.state.watchers):
-- `status` and `launch` warn when jobs are open and no watcher passed lately
CREATE TABLE IF NOT EXISTS watchers (
  watcher_id $TEXT PRIMARY KEY,
  host       $TEXT NOT NULL,
  pid        $INTEGER NOT NULL,
  user_name  $TEXT NOT NULL DEFAULT '',
  started    $REAL NOT NULL,
  last_pass  $REAL NOT NULL,
  pass_s     $REAL NOT NULL DEFAULT 0,
  interval_s $REAL NOT NULL
);

-- what a watcher last acted on for each open job (launcher.state.marks): a pass that finds the
-- same status and row before DUE does nothing more for it (shared by a store's watchers)
CREATE TABLE IF NOT EXISTS watch_marks (
  job_id $TEXT PRIMARY KEY,
  seen   $TEXT NOT NULL,
  due    $REAL NOT NULL
);

-- one poller per target among a store's watchers (launcher.state.polls): its lease, and the
-- statuses it last read, which the other watchers read instead of asking the target
CREATE TABLE IF NOT EXISTS target_polls (
  target      $TEXT PRIMARY KEY,
  owner       $TEXT NOT NULL,
  lease_until $REAL NOT NULL,
  polled_at   $REAL,
  snapshot    $TEXT NOT NULL DEFAULT '{}'
);
""" + NODES_TEMPLATE

# How each engine spells the schema's column types: the only words of SCHEMA_TEMPLATE that differ.
# SQLite: its own affinities (an INTEGER PRIMARY KEY is the rowid; the words are those every store
# since the first was created with). PostgreSQL: 64-bit integers (SQLite's are), DOUBLE PRECISION
# (PostgreSQL's REAL has 4 bytes: a timestamp would lose minutes), TEXT compared byte by byte as
# SQLite's BINARY collation compares it (ORDER BY gives the same order on both), and an identity.
# And the one predicate that names a function: the cancelled rows whose meta carries OVERTAKEN_KEY
# (a submission still unsettled when its job was cancelled: ``launcher.recovery.cancel``), which the
# partial index jobs_overtaken holds, so a watch pass finds them without reading the other cancelled
# rows (``StateStore.watch_rows`` asks with the same words: a planner uses the index only then).
OVERTAKEN_KEY = "launch_overtaken"


def overtaken_rows(contains_fn: str) -> str:
    """Pure: the SQL predicate of the jobs_overtaken index in an engine's words (CONTAINS_FN:
    its substring position function, (haystack, needle) > 0 when found)."""
    return f"state = 'CANCELLED' AND {contains_fn}(meta, '\"{OVERTAKEN_KEY}\"') > 0"


SQLITE_TYPES = {"TEXT": "TEXT", "INTEGER": "INTEGER", "REAL": "REAL",
                "SERIAL": "INTEGER PRIMARY KEY AUTOINCREMENT", "OVERTAKEN_ROWS": overtaken_rows("instr")}
POSTGRES_TYPES = {"TEXT": 'TEXT COLLATE "C"', "INTEGER": "BIGINT", "REAL": "DOUBLE PRECISION",
                  "SERIAL": "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
                  "OVERTAKEN_ROWS": overtaken_rows("strpos")}


def render(types: dict, template: str = SCHEMA_TEMPLATE) -> str:
    """TEMPLATE with its column types in one engine's words (TYPES: ``SQLITE_TYPES`` or
    ``POSTGRES_TYPES``). Pure; a type TYPES does not name is an error (KeyError), never left as it is."""
    return Template(template).substitute(types)


# the SQLite store's schema, as every SQLite store is created with it
SCHEMA = render(SQLITE_TYPES)


def statements(schema: str) -> list[str]:
    """SCHEMA's statements (split at ';', comments dropped)."""
    text = "\n".join(line.split("--", 1)[0] for line in schema.splitlines())
    return [s.strip() for s in text.split(";") if s.strip()]


@lru_cache(maxsize=None)
def tables(schema: str = SCHEMA) -> dict:
    """{table: (its columns in order, [its unique keys: primary key first, as column tuples],
    its integer primary key numbered by the engine ($SERIAL) or None)}, read from an in-memory
    SQLite database made from SCHEMA (``launcher.state.copy`` copies by them)."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(schema)
        out = {}
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                          "AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
        for t in names:
            info = db.execute(f"PRAGMA table_info({t})").fetchall()
            cols = tuple(r[1] for r in info)
            pk = tuple(r[1] for r in sorted(info, key=lambda r: r[5]) if r[5])
            keys = [pk] if pk else []
            for idx in db.execute(f"PRAGMA index_list({t})").fetchall():
                if idx[2] and idx[3] == "u":  # a UNIQUE constraint (the primary key's own index is "pk")
                    keys.append(tuple(r[2] for r in db.execute(f"PRAGMA index_info({idx[1]})").fetchall()))
            rowid = pk[0] if len(pk) == 1 and next(r[2] for r in info if r[1] == pk[0]).upper() == "INTEGER" else None
            out[t] = (cols, keys, rowid)
        return out
    finally:
        db.close()


def migrate(db) -> None:
    """Bring a store written by an earlier schema up to this one, in place and in ONE
    transaction that excludes every other writer (a second process opening it meanwhile
    waits, then finds it done). The same steps serve both engines: DB's ``engine`` says how to
    read and stamp its version and how to exclude the others (SQLite: ``BEGIN IMMEDIATE``;
    PostgreSQL: an advisory lock, ``launcher.state.pg``), and ``STEPS`` run in order, each
    idempotent, before SCHEMA's statements (``CREATE ... IF NOT EXISTS``) in the engine's types.

    Schema 2 adds the ``sweeps`` table (a sweep's spec, stored once) and ``jobs.sweep_id``,
    and fills ``sweep_id`` of the element rows an earlier version wrote (their meta names
    the sweep); those rows keep their own ``spec_yaml`` and are read as before. Schema 4 adds
    the ``watchers`` table, schema 5 the ``watch_marks`` and ``target_polls`` tables (SCHEMA
    creates them: no step of their own), schema 6 ``events.actor`` (``launcher.state.actors``),
    schema 7 the ``node_blames`` and ``node_quarantine`` tables (``launcher.state.nodes``), schema 8
    the ``jobs_overtaken`` partial index (SCHEMA creates it: no step of its own)."""
    engine = engine_of(db)
    if engine.current(db):
        return
    with engine.migration(db):
        if engine.current(db):  # another process did it while this one waited for the lock
            return
        for _version, step in STEPS:
            step(db, engine)
        for statement in engine.schema():
            db.execute(statement)
        engine.finish(db)  # PostgreSQL: row-level security (launcher.state.team); SQLite: nothing
        engine.set_version(db, SCHEMA_VERSION)


def _add_sweep_ids(db, engine) -> None:
    """Schema 2: ``jobs.sweep_id``, filled from the meta of the rows written before it."""
    columns = engine.columns(db, "jobs")
    if columns and "sweep_id" not in columns:  # (no jobs table yet: SCHEMA creates it with the column)
        db.execute(f"ALTER TABLE jobs ADD COLUMN sweep_id {engine.types['TEXT']}")
        db.executemany("UPDATE jobs SET sweep_id=? WHERE job_id=?", _old_elements(db))


def _add_node_tables(db, engine) -> None:
    """Schema 7: the ``node_blames`` and ``node_quarantine`` tables (launcher.state.nodes), in the
    engine's types; idempotent (SCHEMA creates them again, IF NOT EXISTS, on every open)."""
    for statement in statements(render(engine.types, NODES_TEMPLATE)):
        db.execute(statement)


def _add_event_actors(db, engine) -> None:
    """Schema 6: ``events.actor`` (the events written before it name no one: NULL)."""
    columns = engine.columns(db, "events")
    if columns and "actor" not in columns:
        db.execute(f"ALTER TABLE events ADD COLUMN actor {engine.types['TEXT']}")


# (the version a step brings a store to, the step): run in order by ``migrate``, each idempotent
STEPS = [(2, _add_sweep_ids), (6, _add_event_actors), (7, _add_node_tables)]


class SQLiteEngine:
    """How ``migrate`` reads, stamps and locks a SQLite store (``PRAGMA user_version``)."""

    name = "sqlite"
    types = SQLITE_TYPES
    contains = "instr({column}, ?) > 0"  # (SQL) COLUMN holds the text bound to the '?'
    # (SQL) where the marked cancelled rows are read from: SQLite's planner, without statistics,
    # would rather read every cancelled row by jobs_state than the partial index
    overtaken_from = "jobs INDEXED BY jobs_overtaken"

    @staticmethod
    def columns(db, table: str) -> list:
        return [r[1] for r in db.execute(f"PRAGMA table_info({table})").fetchall()]

    @staticmethod
    def version(db) -> int:
        return _version(db)

    def current(self, db) -> bool:
        return "sweep_id" in self.columns(db, "jobs") and _version(db) >= SCHEMA_VERSION

    @staticmethod
    def set_version(db, version: int) -> None:
        db.execute(f"PRAGMA user_version={int(version)}")

    @staticmethod
    def schema() -> list:
        return statements(SCHEMA)

    @staticmethod
    def finish(db) -> None:
        """Nothing: a SQLite store belongs to one person (PostgreSQL's: row-level security)."""  # executescript would COMMIT first

    @staticmethod
    @contextmanager
    def migration(db):
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise


SQLITE = SQLiteEngine()


def engine_of(db):
    """The engine of connection DB: its own ``engine`` (a store's connections name theirs), else
    SQLite (a plain ``sqlite3`` connection: a store being created, a read-only look)."""
    return getattr(db, "engine", SQLITE)


def _version(db) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def _old_elements(db) -> list:
    """(sweep id, job id) of the rows whose meta names the sweep they are an element of."""
    out = []
    for r in db.execute("SELECT job_id, meta FROM jobs WHERE meta LIKE '%\"sweep\"%'").fetchall():
        try:
            sweep = json.loads(r[1] or "{}").get("sweep") or {}
        except ValueError:
            continue
        if isinstance(sweep, dict) and isinstance(sweep.get("id"), str):
            out.append((sweep["id"], r[0]))
    return out
