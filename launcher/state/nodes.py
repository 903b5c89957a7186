"""Bad nodes remembered, for everyone who shares the store (docs/bad-nodes.md).

An attempt that failed on its nodes blames each of them: one ``node_blames`` row per (target,
node, job, attempt), so a watcher deciding on the same attempt twice blames it once. A node
blamed ``after`` times within ``window`` on a target (by any job of the store) is quarantined
there: one ``node_quarantine`` row, upserted, until ``expires``. Later attempts and new launches
on that target exclude the quarantined nodes (``quarantined``: the nodes whose row has not
expired). ``release`` lifts a quarantine and forgets the node's blames, so the next failure
starts counting again. Blames are few (one per node of a failed attempt) and are kept.

On a team's PostgreSQL store (``launcher.state.team``) every member reads both tables, records
blames and quarantines (any member's watcher decides on that member's jobs); lifting a quarantine
(a DELETE) is for the watchers' role and the store's owner.

The rule is pure (``quarantine_due``); the functions below it are the I/O, one transaction each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

from launcher.core.errors import LauncherError

# what a node's name may be: a host name (it travels in a scheduler's option, e.g. --exclude)
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class Quarantine:
    """One quarantined node (times in epoch seconds)."""

    target: str
    node: str
    since: float
    expires: float
    blames: int
    reason: str

    def to_dict(self) -> dict:
        return {"target": self.target, "node": self.node, "since": self.since, "expires": self.expires,
                "blames": self.blames, "reason": self.reason}


def check_node(node: str) -> str:
    """NODE when it is a plain host name, else a LauncherError saying what a node name may be."""
    if not isinstance(node, str) or not NODE_NAME.fullmatch(node):
        raise LauncherError(f"node {node!r}: expected a host name (letters, digits, '.', '_', '-'; at most 128 "
                            "characters, starting with a letter or digit)")
    return node


def quarantine_due(blame_times: Iterable[float], now: float, after: int, window: float) -> int:
    """Pure: how many of BLAME_TIMES fall within WINDOW seconds before NOW when they reach AFTER
    (the node is to be quarantined), else 0."""
    recent = sum(1 for t in blame_times if now - window <= t <= now)
    return recent if recent >= after else 0


def blame(store, target: str, nodes: Iterable[str], job_id: str, attempt: int, why: str, now: float, *,
          after: int, window: float, quarantine_s: float) -> tuple:
    """Record that JOB_ID's ATTEMPT failed on NODES of TARGET (WHY: its failure), and quarantine
    each node blamed AFTER times within WINDOW for QUARANTINE_S seconds from NOW. One
    transaction; a node that attempt blamed already is not blamed again (a watcher deciding on
    the attempt once more). Returns (the nodes blamed now, the quarantines this call made or
    extended)."""
    nodes = sorted({check_node(n) for n in nodes})
    blamed, made = [], []
    if not nodes:
        return blamed, made
    with store.tx() as db:  # reads the blames to decide a quarantine: every other writer waits
        had = {r[0] for r in db.execute("SELECT node FROM node_blames WHERE target = ? AND job_id = ? AND attempt = ?",
                                        (target, job_id, int(attempt))).fetchall()}
        for node in (n for n in nodes if n not in had):
            db.execute("INSERT INTO node_blames(target, node, ts, job_id, attempt, why) VALUES(?,?,?,?,?,?) "
                       "ON CONFLICT (target, node, job_id, attempt) DO NOTHING",
                       (target, node, now, job_id, int(attempt), why[:500]))
            blamed.append(node)
            times = [float(r[0]) for r in db.execute(
                "SELECT ts FROM node_blames WHERE target = ? AND node = ? AND ts >= ?",
                (target, node, now - window)).fetchall()]
            count = quarantine_due(times, now, after, window)
            if not count:
                continue
            reason = (f"blamed {count} times within {_hours(window)}; last: job {job_id} attempt {attempt} "
                      f"({why})")[:500]
            q = Quarantine(target, node, now, now + quarantine_s, count, reason)
            db.execute("INSERT INTO node_quarantine(target, node, since, expires, blames, reason) "
                       "VALUES(?,?,?,?,?,?) ON CONFLICT (target, node) DO UPDATE SET "
                       "since = CASE WHEN node_quarantine.expires > excluded.since THEN node_quarantine.since "
                       "ELSE excluded.since END, expires = excluded.expires, blames = excluded.blames, "
                       "reason = excluded.reason", (q.target, q.node, q.since, q.expires, q.blames, q.reason))
            made.append(q)
    return blamed, made


def quarantined(store, target: str, now: float) -> tuple:
    """The nodes of TARGET quarantined at NOW, sorted (one query)."""
    rows = store.db.execute("SELECT node FROM node_quarantine WHERE target = ? AND expires > ? ORDER BY node",
                            (target, now)).fetchall()
    return tuple(r[0] for r in rows)


def quarantines(store, now: float, target: Optional[str] = None) -> list[Quarantine]:
    """Every quarantine in force at NOW (of TARGET only, when given), by target and node."""
    q = "SELECT target, node, since, expires, blames, reason FROM node_quarantine WHERE expires > ?"
    args: list = [now]
    if target is not None:
        q += " AND target = ?"
        args.append(target)
    rows = store.db.execute(q + " ORDER BY target, node", args).fetchall()
    return [Quarantine(r[0], r[1], float(r[2]), float(r[3]), int(r[4]), r[5]) for r in rows]


def release(store, node: str, target: Optional[str] = None) -> list[str]:
    """Lift NODE's quarantine (on TARGET, else on every target) and forget its blames there:
    the targets it was quarantined on (expired or not)."""
    check_node(node)
    where, args = "node = ?", [node]
    if target is not None:
        where, args = where + " AND target = ?", args + [target]
    with store.tx() as db:
        targets = [r[0] for r in db.execute(f"SELECT target FROM node_quarantine WHERE {where} ORDER BY target",
                                            args).fetchall()]
        db.execute(f"DELETE FROM node_quarantine WHERE {where}", args)
        db.execute(f"DELETE FROM node_blames WHERE {where}", args)
    return targets


def _hours(seconds: float) -> str:
    h = seconds / 3600
    return f"{h:g} h" if h >= 1 else f"{seconds / 60:g} min"
