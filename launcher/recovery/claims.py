"""What one watch pass did with a job (``Outcome``), and the job claim every decision is
taken under (exactly-once: one watcher decides on a job at a time; a crashed holder's
claim expires after ``claim_ttl()``)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

from launcher.core.errors import LauncherError

CLAIM_TTL_S = 120.0  # longer than a submission takes; a crashed holder's claim is taken over after it


def claim_ttl() -> float:
    """$LAUNCHER_CLAIM_TTL seconds, else CLAIM_TTL_S."""
    import os

    try:
        v = float(os.environ.get("LAUNCHER_CLAIM_TTL", "") or CLAIM_TTL_S)
    except ValueError:
        raise LauncherError(f"LAUNCHER_CLAIM_TTL={os.environ['LAUNCHER_CLAIM_TTL']!r}: expected seconds "
                            "(a number)") from None
    return v if v > 0 else CLAIM_TTL_S


@dataclass
class Outcome:
    job_id: str
    action: str  # "running", "resubmitted", "waiting", "done", "gave_up", "superseded", "adopted", "failed",
    #              "claimed" (another watcher holds it), "control_plane"
    reason: str = ""


@contextmanager
def claimed(store, job_id: str, ttl: Optional[float] = None) -> Iterator:
    """The job's claim for the duration of the block (None when another watcher holds it)."""
    c = store.claim(job_id, ttl=ttl or claim_ttl())
    try:
        yield c
    finally:
        if c is not None:
            store.release(job_id, c.owner)
