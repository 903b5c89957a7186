"""Who did what on a store, and whose its jobs are (issue 33, item 2: a team's names).

* **The actor of an event** (``events.actor``, schema 6): who wrote it, for every event (a
  cancel, a resubmission, a close, a decision). On a team's PostgreSQL store it is the
  connecting role, filled by the server itself (``DEFAULT current_user``, as the ``owner``
  columns are: ``launcher.state.team``): a cancel by the watchers' role reads as that role's,
  never as "user". On SQLite it is the OS user of the process that wrote it, filled by a TEMP
  trigger that each writing connection installs (``install``): SQLite has no session user and a
  column default must be a constant. Either way no writer names itself, and none can leave it
  out. Events written before schema 6 name no one (NULL).
* **The owner of a job**: on PostgreSQL its ``owner`` column (the role that created it); on
  SQLite, which has no such column (the store is one person's), the user who owns the file.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import Optional

from launcher.state.watchers import user_name

TRIGGER = "launcher_event_actor"


def trigger_sql(name: str) -> str:
    """The TEMP trigger that fills ``actor`` of each event this connection inserts without one
    with NAME (a quoted literal: a user name is data, never SQL)."""
    literal = "'" + name.replace("'", "''") + "'"
    return (f"CREATE TEMP TRIGGER IF NOT EXISTS {TRIGGER} AFTER INSERT ON main.events FOR EACH ROW "
            f"WHEN NEW.actor IS NULL BEGIN UPDATE events SET actor = {literal} WHERE id = NEW.id; END")


def install(db) -> None:
    """SQLite: this connection's events name this process's user (``trigger_sql``)."""
    db.execute(trigger_sql(user_name()))


def actor(store) -> str:
    """Who this store's writes are by: the role on a team's PostgreSQL store, else the OS user."""
    role = getattr(store.db, "role", "") if store.url else ""
    return role or user_name()


def file_owner(path) -> str:
    """The user who owns PATH (this user when it does not exist yet, or "uid N" without a name)."""
    try:
        uid = Path(path).stat().st_uid
    except OSError:
        uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def store_owner(store) -> Optional[str]:
    """Whose the jobs of a SQLite store are (the owner of its file); None on PostgreSQL, where
    each job's row names its owner."""
    return None if store.url else file_owner(store.path)


def owner_of(row, default: Optional[str]) -> Optional[str]:
    """ROW's owner: its own column (PostgreSQL), else DEFAULT (``store_owner``)."""
    return getattr(row, "owner", None) or default


def event_dict(row) -> dict:
    """An events row as ``StateStore.events`` gives it: {"ts", "kind", **detail}, and "actor"
    when the row names one (a store read as it is, of a schema before 6, has no such column)."""
    d = {"ts": row["ts"], "kind": row["kind"], **json.loads(row["detail"])}
    who = row["actor"] if "actor" in row.keys() else None
    if who:
        d["actor"] = who
    return d
