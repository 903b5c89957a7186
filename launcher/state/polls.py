"""One scheduler poll per target per tick, however many watchers (issue 29, item 3).

The watchers of a store elect one poller per target with a lease row in ``target_polls``
(both engines): the poller asks the target for the status of its open jobs and publishes
them there (``snapshot``: one JSON object, keyed by job, native id and attempt); the other
watchers read that snapshot instead of asking the target, for as long as it is fresh. The
lease is taken by compare-and-swap (``UPDATE ... WHERE owner = me OR lease_until < now``), so at
most one watcher holds a target's lease at a time; the poller renews it with every poll, and
gives it up at once when its status call fails.

Election is only an optimisation, never a source of truth for what runs: a status in a
snapshot is what the scheduler said at ``polled_at``, exactly as if the reader had asked
then. A reader that finds no fresh snapshot (the poller is slow, frozen or dead) asks the
target itself, as if there were no election, and once the poller's lease has run out
(``lease_s``) the next watcher to pass takes it over. A target whose new poller has not
published its first snapshot yet is left to it (so watchers that start together ask once).
So a poller killed with -9, or frozen, costs extra status calls for one lease, and never a
job unobserved for longer than ``fresh_s`` and one pass; a job the snapshot does not hold
yet (launched or resubmitted since) waits for the poller's next pass.

On a team's PostgreSQL store only the watchers' role (``launcher_watcher``) and the store's
owner may read or write the table (``launcher.state.team``): a snapshot names every job's
state, and a status forged there would be acted on by every watcher. A person's own watcher
(a role that acts only on its own jobs) does not take part: it asks its targets itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from launcher.core.status import Status


@dataclass(frozen=True)
class Lease:
    """One target's row: who polls it until when, and what it last saw."""

    target: str
    owner: str
    lease_until: float
    polled_at: Optional[float]
    snapshot: str  # JSON: {key(job id, native id, attempt): Status.to_dict()}


def key(job_id: str, native_id: str, attempt: int) -> str:
    """A snapshot's key for one attempt: a status is never applied to another attempt of the job."""
    return f"{job_id}\x1f{native_id}\x1f{attempt}"


def read(store, targets) -> dict:
    """{target: Lease} of the TARGETS that have a row (one query)."""
    targets = list(targets)
    if not targets:
        return {}
    rows = store.db.execute("SELECT target, owner, lease_until, polled_at, snapshot FROM target_polls "
                            f"WHERE target IN ({','.join('?' * len(targets))})", targets).fetchall()
    return {r[0]: Lease(r[0], r[1], float(r[2]), None if r[3] is None else float(r[3]), r[4] or "{}") for r in rows}


def take(store, targets, owner: str, now: float, lease_s: float) -> set:
    """Take or renew OWNER's lease of each of TARGETS that no one else holds at NOW, until NOW +
    LEASE_S, in one transaction; the targets OWNER holds now."""
    targets = sorted(targets)  # (in order: two watchers never wait for each other's rows in a circle)
    if not targets:
        return set()
    with store.tx(jobs=()) as db:  # each statement decides by itself (the UPDATE's WHERE is the CAS)
        db.executemany("INSERT INTO target_polls(target, owner, lease_until, polled_at, snapshot) "
                       "VALUES(?, ?, ?, NULL, '{}') ON CONFLICT (target) DO NOTHING",
                       [(t, owner, now + lease_s) for t in targets])
        db.executemany("UPDATE target_polls SET owner = ?, lease_until = ? "
                       "WHERE target = ? AND (owner = ? OR lease_until < ?)",
                       [(owner, now + lease_s, t, owner, now) for t in targets])
        rows = db.execute(f"SELECT target FROM target_polls WHERE owner = ? AND target IN "
                          f"({','.join('?' * len(targets))})", (owner, *targets)).fetchall()
    return {r[0] for r in rows}


def publish(store, owner: str, snapshots: dict, polled_at: float) -> None:
    """Write OWNER's snapshots ({target: {key: Status}}) polled at POLLED_AT, for the targets
    whose lease OWNER still holds (one transaction; a lease lost meanwhile is not written)."""
    if not snapshots:
        return
    rows = [(polled_at, json.dumps({k: st.to_dict() for k, st in statuses.items()}, separators=(",", ":")),
             target, owner) for target, statuses in sorted(snapshots.items())]
    with store.tx(jobs=()) as db:
        db.executemany("UPDATE target_polls SET polled_at = ?, snapshot = ? WHERE target = ? AND owner = ?", rows)


def release(store, targets, owner: str) -> None:
    """End OWNER's lease of TARGETS now (its status call failed: another watcher may fare better)."""
    targets = list(targets)
    if targets:
        with store.tx(jobs=()) as db:
            db.execute(f"UPDATE target_polls SET lease_until = 0 WHERE owner = ? AND target IN "
                       f"({','.join('?' * len(targets))})", (owner, *targets))


def starting(lease: Optional[Lease], owner: str, now: float) -> bool:
    """Pure: whether another watcher holds LEASE's target at NOW and has not published yet (its
    first poll is under way: the target is left to it rather than asked twice)."""
    return lease is not None and lease.owner != owner and lease.lease_until >= now and lease.polled_at is None


def fresh(lease: Optional[Lease], owner: str, now: float, fresh_s: float) -> bool:
    """Pure: whether LEASE's snapshot, published by another watcher, may be read at NOW instead
    of asking the target: it was polled less than FRESH_S ago by a watcher whose lease holds."""
    return (lease is not None and lease.owner != owner and lease.polled_at is not None
            and lease.lease_until >= now and 0 <= now - lease.polled_at < fresh_s)


def statuses(lease: Lease) -> dict:
    """{key: Status} of LEASE's snapshot; an unreadable snapshot reads as empty (its jobs are asked)."""
    try:
        return {k: Status.from_dict(d) for k, d in json.loads(lease.snapshot).items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}
