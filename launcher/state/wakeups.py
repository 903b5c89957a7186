"""Launches and cancels wake the watchers of a team's PostgreSQL store (issue 29, item 4):
the writes that open, submit or close a job also send ``NOTIFY launcher_jobs`` in their own
transaction (delivered when it commits, never for one rolled back), and a ``launcher watch``
waits for that between its passes (``launcher.state.pg.Listener``, ``LISTEN``) instead of
sleeping out its whole interval: a new job or a cancel is acted on within about a second,
without a faster poll. The notification carries nothing (no job id: on a store whose members
read only their own jobs, a listener learns no one's ids); a woken watcher runs its ordinary
pass. On SQLite (one person's store) nothing is sent and watchers sleep their interval.
"""

from __future__ import annotations

CHANNEL = "launcher_jobs"
NOTIFY = f"SELECT pg_notify('{CHANNEL}', '')"


def announce(store, db) -> None:
    """Inside a write transaction (DB) of STORE: wake the watchers when it commits (PostgreSQL)."""
    if store.url:
        db.execute(NOTIFY)


def listener(store):
    """What a watcher of STORE waits on between passes: a ``launcher.state.pg.Listener`` on a
    PostgreSQL store, else None (sleep the interval)."""
    if not getattr(store, "url", ""):
        return None
    # a PostgreSQL store's own module (psycopg): imported only for such a store, like its connection
    from launcher.state.pg import Listener

    return Listener(store.url, CHANNEL)
