"""What a watcher last acted on for each open job, so the next pass acts only on change
(``launcher.recovery.changes`` decides; ``launcher.recovery.watch`` reads and writes).

One ``watch_marks`` row per job that a pass found running with nothing to do: ``seen``, the
fingerprint of the scheduler's status and of the job row at that moment, and ``due``, when the
job must be looked at again even if nothing changes (its next progress read, a revisit). A
pass that reads the same fingerprint before ``due`` spends no more on the job; anything else
(a new status, a write to the job, a due time reached) sends it through the whole decision.
The rows are shared by every watcher of the store: what one watcher saw, the others skip.
A row is advice, never a lock or a fact: a missing or stale row only costs one more decision.
"""

from __future__ import annotations

from typing import Iterable

from launcher.state.bulk import chunks


def load(store) -> dict:
    """{job id: (seen, due)} of every mark in STORE (one query)."""
    return {r[0]: (r[1], float(r[2])) for r in store.db.execute("SELECT job_id, seen, due FROM watch_marks")}


def save(store, keep: Iterable[tuple], forget: Iterable[str] = ()) -> None:
    """Write the marks KEEP ((job id, seen, due) each) and delete those of the jobs FORGET names,
    in one transaction. A job deleted meanwhile (``launcher gc``) is skipped: a mark needs its job."""
    keep, forget = sorted(keep), sorted(dict.fromkeys(forget))  # (id order: two writers never wait in a circle)
    if not keep and not forget:
        return
    with store.tx(jobs=()) as db:  # a mark is written by one statement each; no write is decided on it
        for part in chunks(forget):
            db.execute(f"DELETE FROM watch_marks WHERE job_id IN ({','.join('?' * len(part))})", part)
        db.executemany("INSERT INTO watch_marks(job_id, seen, due) SELECT ?, ?, ? "
                       "WHERE EXISTS (SELECT 1 FROM jobs WHERE job_id = ?) "
                       "ON CONFLICT (job_id) DO UPDATE SET seen = excluded.seen, due = excluded.due",
                       [(j, seen, due, j) for j, seen, due in keep])
