"""A sweep in the state store: its spec and what its elements share, stored ONCE.

One ``sweeps`` row holds the sweep's spec text and the meta every element shares (the spec's
folder, the sweep's size and seed, the array's native id once it is submitted). Each element
is a ``jobs`` row of its own (``sweep_id`` names the sweep) holding only what is its own: its
state, handle, checkpoint root and a small meta (index, params, seed, recovery state).

A reader never sees the split: ``job_rows`` gives an element the sweep's spec text as its
``spec_yaml`` and the shared meta merged under its own, so every reader of a job (watch,
status, report, logs, cancel, burst, early stop, the queue) gets the same ``JobRow`` as when
each element row carried the whole spec. Element rows written by an earlier version (before
the ``sweeps`` table) carry their own spec and meta, and are read as they are.
"""

from __future__ import annotations

import json
import time
from typing import Optional

from launcher.state import wakeups
from launcher.state.rows import JobRow
from launcher.state.team import HOMES_TABLE

# a sweep's element rows, found by the indexed ``jobs.sweep_id`` (rows written before that
# column had it filled when their store was migrated: ``launcher.state.schema``)
ELEMENTS_SQL = "SELECT job_id, state, meta FROM jobs WHERE sweep_id=?"
SHARED_KEYS = ("spec_base", "seed_source")  # element meta keys a sweep's elements share
SHARED_SWEEP_KEYS = ("size", "seed", "array")  # and under meta["sweep"]


def own_meta(meta: dict, shared: dict) -> dict:
    """Pure: what an element's row stores of its META, given the sweep's SHARED meta (the
    keys with the shared value left out; ``sweep.id`` and ``sweep.index`` always kept, so a
    row read on its own still names its sweep). ``merged(own_meta(m, s), s) == m``."""
    out = {k: v for k, v in meta.items() if k != "sweep" and not (k in SHARED_KEYS and shared.get(k) == v)}
    sweep, common = meta.get("sweep"), shared.get("sweep") or {}
    if isinstance(sweep, dict):
        out["sweep"] = {k: v for k, v in sweep.items() if not (k in SHARED_SWEEP_KEYS and common.get(k) == v)}
    return out


def merged(own: dict, shared: Optional[dict]) -> dict:
    """Pure: an element's meta as readers see it: the sweep's SHARED meta under its OWN."""
    if not shared:
        return own
    out = {**{k: shared[k] for k in SHARED_KEYS if k in shared}, **own}
    common = shared.get("sweep")
    if common and isinstance(own.get("sweep"), dict):
        out["sweep"] = {**common, **own["sweep"]}
    return out


def shared_of(meta: dict) -> dict:
    """Pure: the part of an element's META that every element of its sweep shares."""
    sweep = meta.get("sweep") or {}
    return {**{k: meta[k] for k in SHARED_KEYS if k in meta},
            "sweep": {k: sweep[k] for k in ("id", *SHARED_SWEEP_KEYS) if k in sweep}}


def job_rows(db, rows) -> list:
    """``JobRow``s of the jobs table's ROWS (``SELECT *``), the elements of a sweep given
    their sweep's spec and shared meta (read once per sweep)."""

    wanted = {r["sweep_id"] for r in rows if r["sweep_id"] and not r["spec_yaml"]}
    sweeps = _sweeps(db, wanted) if wanted else {}
    out = []
    for r in rows:
        d = dict(r)
        meta = json.loads(d["meta"] or "{}")
        got = sweeps.get(d["sweep_id"]) if not d["spec_yaml"] else None
        if got is not None:
            d["spec_yaml"] = got[0]
            meta = merged(meta, got[1])
        d["meta"] = meta
        out.append(JobRow(**d))
    return out


def _sweeps(db, ids) -> dict:
    """{sweep id: (spec text, shared meta)} of the sweeps IDS (one query)."""
    ids = sorted(ids)
    q = f"SELECT sweep_id, spec_yaml, meta FROM sweeps WHERE sweep_id IN ({','.join('?' * len(ids))})"
    return {r["sweep_id"]: (r["spec_yaml"], json.loads(r["meta"] or "{}")) for r in db.execute(q, ids).fetchall()}


class SweepStore:
    """A sweep's rows in the state store: ``StateStore.sweeps`` (its own transactions, on the
    store's connection)."""

    def __init__(self, store):
        self.store = store

    def begin(self, sweep_id, name, target, backend, spec_path, spec_yaml, shared: dict, rows) -> None:
        """Record the sweep (its spec and SHARED meta, once) and every element of it SUBMITTING
        (ROWS: (job_id, ckpt_root, meta as readers see it)), in ONE transaction: all or none.
        Each element's row keeps only its own meta (``own_meta``)."""
        now = time.time()
        rows = list(rows)
        with self.store.tx() as db:
            db.execute("INSERT INTO sweeps(sweep_id,name,spec_path,spec_yaml,size,created,meta) VALUES(?,?,?,?,?,?,?)",
                       (sweep_id, name, spec_path, spec_yaml, len(rows), now, json.dumps(shared)))
            db.executemany(
                "INSERT INTO jobs(job_id,name,target,backend,spec_path,spec_yaml,created,updated,state,ckpt_root,meta,"
                "sweep_id) VALUES(?,?,?,?,?,'',?,?,'SUBMITTING',?,?,?)",
                [(job_id, name, target, backend, spec_path, now, now, root, json.dumps(own_meta(meta, shared)),
                  sweep_id) for job_id, root, meta in rows])
            self.store.record_homes(db, [job_id for job_id, _, _ in rows])
            wakeups.announce(self.store, db)  # a team's watchers: a new sweep (its queue to fill)

    def forget(self, sweep_id: str) -> None:
        """Remove a sweep whose submission failed: its row, its elements and anything of theirs."""
        with self.store.tx() as db:
            for table in ("attempts", "events", "claims") + ((HOMES_TABLE,) if self.store.url else ()):
                db.execute(f"DELETE FROM {table} WHERE job_id IN (SELECT job_id FROM jobs WHERE sweep_id=?)",
                           (sweep_id,))
            db.execute("DELETE FROM jobs WHERE sweep_id=?", (sweep_id,))
            db.execute("DELETE FROM sweeps WHERE sweep_id=?", (sweep_id,))

    def share(self, sweep_id: str, **changes) -> None:
        """Set keys of the meta every element of SWEEP_ID shares under ``sweep`` (the array's id)."""
        with self.store.tx() as db:
            row = db.execute("SELECT meta FROM sweeps WHERE sweep_id=?", (sweep_id,)).fetchone()
            if row is None:
                return
            meta = json.loads(row["meta"] or "{}")
            meta["sweep"] = {**(meta.get("sweep") or {}), **changes}
            db.execute("UPDATE sweeps SET meta=? WHERE sweep_id=?", (json.dumps(meta), sweep_id))

    def jobs(self, sweep_id: str) -> list:
        """The element rows of SWEEP_ID in index order (empty when there is no such sweep)."""
        found = self.store.db.execute("SELECT * FROM jobs WHERE sweep_id=?", (sweep_id,)).fetchall()
        rows = [j for j in job_rows(self.store.db, found) if (j.meta.get("sweep") or {}).get("id") == sweep_id]
        return sorted(rows, key=lambda j: j.meta["sweep"]["index"])

    def exists(self, name: str) -> bool:
        """Whether NAME is a sweep (its row, or elements recorded before the sweeps table)."""
        q = "SELECT 1 FROM sweeps WHERE sweep_id=? UNION ALL SELECT 1 FROM jobs WHERE sweep_id=? LIMIT 1"
        return self.store.db.execute(q, (name, name)).fetchone() is not None

    def element_states(self, sweep_id: str) -> dict:
        """{job id: (state, handle)} of SWEEP_ID's elements: what a status refresh changes,
        read without the rest of each row."""
        q = "SELECT job_id, state, handle FROM jobs WHERE sweep_id=?"
        return {r[0]: (r[1], r[2]) for r in self.store.db.execute(q, (sweep_id,)).fetchall()}

    def queued(self, state: str) -> list:
        """The ids of the sweeps that have an element in STATE (QUEUED: waiting for a slot)."""
        q = "SELECT DISTINCT sweep_id FROM jobs WHERE state=? AND sweep_id IS NOT NULL ORDER BY sweep_id"
        return [r[0] for r in self.store.db.execute(q, (state,)).fetchall()]

    def update_elements(self, sweep_id: str, change) -> list:
        """Read SWEEP_ID's element rows and write what CHANGE makes of them, in ONE write
        transaction (one writer at a time: every caller sees what an earlier one wrote).
        CHANGE gets {index: (job id, state, meta as stored)} and returns
        [(job id, new meta, event kind, event detail)]; its list is returned."""
        with self.store.tx() as db:
            found = db.execute(ELEMENTS_SQL, (sweep_id,)).fetchall()
            elements = {}
            for r in found:
                try:
                    meta = json.loads(r["meta"] or "{}")
                except ValueError:  # a damaged row: left out (the watch pass reports it), never stops the others
                    continue
                if not isinstance(meta, dict):
                    continue
                sw = meta.get("sweep") or {}
                if sw.get("id") == sweep_id and isinstance(sw.get("index"), int):
                    elements[sw["index"]] = (r["job_id"], r["state"], meta)
            writes = change(elements)
            now = time.time()
            db.executemany("UPDATE jobs SET meta=?, updated=? WHERE job_id=?",
                           [(json.dumps(meta), now, job_id) for job_id, meta, _, _ in writes])
            db.executemany("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)",
                           [(job_id, now, kind, json.dumps(detail)) for job_id, _, kind, detail in writes])
        return writes
