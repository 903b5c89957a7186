"""Which watcher asks a target for its jobs' status in a pass (``launcher.state.polls``: the
lease, the snapshot and why it is safe). ``tracking.refresh`` calls ``ask_targets`` with the
watcher's ``Poller``; without one (``launcher status``, `launch --follow`, a one-off `watch
--once`) every target is asked directly, so a one-off look sees the scheduler as it is now."""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

from launcher.backend.protocols import Handle
from launcher.core.errors import LauncherError
from launcher.state import polls


@dataclass
class Poller:
    """One watcher process's part in the election: its name, and its pass interval, which sets
    how old a snapshot it reads may be (``fresh_s``) and how long its lease holds (``lease_s``)."""

    interval: float
    owner: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}")

    @property
    def fresh_s(self) -> float:
        """A snapshot younger than two intervals is read (the poller's own pass takes time too)."""
        return 2.0 * self.interval

    @property
    def lease_s(self) -> float:
        """A poller that stops renewing is replaced after three intervals (1 s at least)."""
        return max(3.0 * self.interval, 1.0)

    @staticmethod
    def takes_part(store) -> bool:
        """Whether this store's role reads and writes the snapshots: always on SQLite; on a team's
        PostgreSQL store, a role that acts on every job (``launcher.state.polls``)."""
        return bool(getattr(store.db, "acts_on_all", True))


def ask_targets(store, by_target: dict, ask: Callable, poller=None, clock=time.time) -> dict:
    """{target: [Status] for its rows in order, or the LauncherError its query raised}, for
    BY_TARGET ({target: [(row, Handle)]}). ASK(target, handles) is the status call. With a
    POLLER: a fresh snapshot another watcher published is read instead of asking (a job it
    does not hold yet gets None: left to the poller's next pass); a target whose new poller has
    not published yet is left to it (every job None); the others are asked, and what a target
    this watcher holds the lease of answered is published."""
    if poller is None or not by_target or not Poller.takes_part(store):
        return {t: _ask(ask, t, [h for _, h in pairs]) for t, pairs in by_target.items()}
    now = clock()
    leases, readable, theirs, mine = _elect(store, by_target, poller, now)
    out, published, failed = {}, {}, []
    for target, pairs in by_target.items():
        if target in readable:
            out[target] = _from_snapshot(pairs, polls.statuses(leases[target]))
        elif target in theirs:  # its poller's first poll is under way (if it died: its lease runs out)
            out[target] = [None] * len(pairs)
        else:  # this watcher's lease; or its poller is slow, frozen or gone: asked by this watcher too
            out[target] = _ask(ask, target, [h for _, h in pairs])
            if target not in mine:
                continue
            if isinstance(out[target], LauncherError):
                failed.append(target)
            else:
                published[target] = _to_snapshot(pairs, out[target])
    polls.publish(store, poller.owner, published, now)
    polls.release(store, failed, poller.owner)
    return out


def _elect(store, by_target: dict, poller: Poller, now: float) -> tuple[dict, set, set, set]:
    """(the leases of BY_TARGET's targets, those whose fresh snapshot this watcher reads, those
    whose new poller has not published yet, those whose lease POLLER holds now). A target
    another watcher took meanwhile is read again."""
    leases = polls.read(store, by_target)
    readable = {t for t in by_target if polls.fresh(leases.get(t), poller.owner, now, poller.fresh_s)}
    theirs = {t for t in by_target if t not in readable and polls.starting(leases.get(t), poller.owner, now)}
    mine = polls.take(store, [t for t in by_target if t not in readable | theirs], poller.owner, now, poller.lease_s)
    lost = [t for t in by_target if t not in readable | theirs | mine]  # another watcher took it meanwhile
    if lost:
        leases.update(polls.read(store, lost))
        readable |= {t for t in lost if polls.fresh(leases.get(t), poller.owner, now, poller.fresh_s)}
        theirs |= {t for t in lost if polls.starting(leases.get(t), poller.owner, now)}
    return leases, readable, theirs, mine


def _to_snapshot(pairs: list, statuses: list) -> dict:
    """What a poller publishes of its answer STATUSES for PAIRS ([(row, Handle)])."""
    return {polls.key(r.job_id, h.native_id, h.attempt): st for (r, h), st in zip(pairs, statuses)}


def _from_snapshot(pairs: list, snapshot: dict) -> list:
    """The statuses of PAIRS from SNAPSHOT, None for a job it does not hold (launched or
    resubmitted since it was taken: the poller asks for it at its next pass, and this pass
    leaves it alone)."""
    return [snapshot.get(polls.key(r.job_id, h.native_id, h.attempt)) for r, h in pairs]


def _ask(ask: Callable, target: str, handles: list[Handle]):
    try:
        return list(ask(target, handles))
    except LauncherError as e:
        return e
