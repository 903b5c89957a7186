"""A job's claim: the lease every decision about a job is taken under (exactly-once: one
process acts on a job at a time; a crashed holder's claim expires after ``claim_ttl()``, and
``StateStore.claim`` takes an expired one over), and keeping it alive while a slow call made
under it runs.

Keeping a job's claim alive while a slow call made under it runs (a submission slower than
the claim's TTL: a SkyPilot launch that provisions, a scheduler that answers late).

A claim expires TTL seconds after it was taken, so that a crashed holder's jobs are taken over.
A holder that is alive but waiting on its backend must therefore renew it, or another watcher
takes the job over mid-call and decides on it without knowing a submission is under way (a
queued element's start would be judged lost and started again). ``kept_alive`` renews the
claim every TTL/3 from a daemon thread with a store connection of its own (SQLite connections
are not shared between threads) opened only once a renewal is due: a call that ends within
TTL/3 costs one thread and no store work. Each renewal also calls ``on_renew(that store,
job id)`` (a start records there that its starter is still alive). The thread dies with the
process: a killed holder's claim expires as before.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

from launcher.core import knobs
from launcher.core.errors import LauncherError
from launcher.state.store import StateStore

# longer than a submission takes; a crashed holder's claim is taken over after it ($LAUNCHER_CLAIM_TTL)
CLAIM_TTL_S = knobs.CLAIM_TTL_S
claim_ttl = knobs.claim_ttl


@contextmanager
def claimed(store, job_id: str, ttl: Optional[float] = None, wait: bool = True, **claim) -> Iterator:
    """The job's claim for the duration of the block (None when another process holds it; with
    WAIT False, also while another session is writing the job: ``StateStore.claim``), given back
    at its end unless the block's last write gave it back (``Claim.released``). CLAIM: what else
    ``StateStore.claim`` takes (``recovery``, ``view``)."""
    c = store.claim(job_id, ttl=ttl or claim_ttl(), wait=wait, **claim)
    try:
        yield c
    finally:
        if c is not None and not c.released:
            store.release(job_id, c.owner)


@dataclass
class Keeping:
    """What the renewals did: how many, and whether the claim was found taken over (lost)."""

    renewals: int = 0
    lost: bool = False
    errors: list = field(default_factory=list)  # renewals that failed (a locked store): retried


def renewal_interval(ttl: float) -> float:
    """Pure: seconds between renewals of a claim of TTL seconds (three chances before it expires)."""
    return max(0.01, float(ttl) / 3.0)


@contextmanager
def kept_alive(store, job_id: str, owner: str, ttl: float,
               on_renew: Optional[Callable] = None) -> Iterator[Keeping]:
    """Renew OWNER's claim of JOB_ID (for TTL seconds each time) until the block ends."""
    keeping, stop = Keeping(), threading.Event()
    t = threading.Thread(target=_renew, args=(store, job_id, owner, ttl, on_renew, keeping, stop),
                         name=f"launcher-claim-{job_id}", daemon=True)
    t.start()
    try:
        yield keeping
    finally:
        stop.set()
        t.join()


def _renew(store, job_id: str, owner: str, ttl: float, on_renew, keeping: Keeping, stop: threading.Event) -> None:
    own = None
    try:
        while not stop.wait(renewal_interval(ttl)):
            try:
                own = own or StateStore(store.home, url=store.url)
                if own.claim(job_id, ttl=ttl, owner=owner) is None:  # taken over (we were frozen) or gone
                    keeping.lost = True
                    return
                keeping.renewals += 1
                if on_renew is not None:
                    on_renew(own, job_id)
            except LauncherError as e:  # the store is busy or failing: the next tick tries again
                keeping.errors.append(str(e))
    finally:
        if own is not None:
            own.close()
