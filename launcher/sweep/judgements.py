"""Early-stopping judgements kept in the state store, so none is ever made twice.

Each element's job row keeps its own in its meta: ``early_stop`` = {"judgements": [
Judgement.to_json(), ...]}, and every judgement is also an ``early_stop`` event of the element
(``launcher status JOB`` lists it with its reason).

``record`` judges a sweep and stores the new judgements in ONE write transaction (SQLite's
BEGIN IMMEDIATE: one writer at a time), reading the judgements already recorded inside it. Any
number of watchers may call it at once: the first to write records a judgement, the others
find it recorded and ``judge`` (``launcher.sweep.early_stop``) returns nothing new for it. A
rung's ranking therefore always sees every judgement made before it, whichever watcher made it.
"""

from __future__ import annotations

import json
import time
from typing import Mapping, Optional

from launcher.recovery.state import RecoveryState
from launcher.core.status import is_final
from launcher.sweep.early_stop import Judgement, judge
from launcher.spec.sweep import EarlyStop

KEY = "early_stop"
EVENT = "early_stop"


def judgements_of(meta: dict) -> list[Judgement]:
    """The judgements recorded in one element row's META, oldest first."""
    raw = (meta.get(KEY) or {}).get("judgements") or []
    return [Judgement(**j) for j in raw if isinstance(j, dict)]


def stop_of(meta: dict) -> Optional[Judgement]:
    """The judgement that stopped the element (None: it was never stopped)."""
    return next((j for j in judgements_of(meta) if j.stop), None)


# a sweep's element rows, found by the indexed ``jobs.sweep_id`` (``launcher.state.sweeps``);
# rows written before that column had it filled when their store was migrated (``statemigrate``)
ELEMENTS_SQL = "SELECT job_id, state, meta FROM jobs WHERE sweep_id=?"


def _elements(db, sweep_id: str) -> dict:
    """index -> (job id, state, meta) of SWEEP_ID's element rows, read inside the transaction
    (each row's own meta, as stored: what ``record`` writes back)."""
    found = db.execute(ELEMENTS_SQL, (sweep_id,)).fetchall()
    out = {}
    for r in found:
        try:
            meta = json.loads(r["meta"] or "{}")
        except ValueError:  # a damaged row: left out (the watch pass reports it), never stops the others
            continue
        if not isinstance(meta, dict):
            continue
        sw = meta.get("sweep") or {}
        if sw.get("id") == sweep_id and isinstance(sw.get("index"), int):
            out[sw["index"]] = (r["job_id"], r["state"], meta)
    return out


def record(store, sweep_id: str, cfg: EarlyStop, reports: Mapping[int, Mapping]) -> list[Judgement]:
    """Judge SWEEP_ID's elements on REPORTS (index -> {step: {metric: value}}) against every
    judgement recorded so far, and record the new ones (returned) with their events."""
    with store.tx() as db:
        els = _elements(db, sweep_id)
        previous = [j for _, _, meta in els.values() for j in judgements_of(meta)]
        ended = {i for i, (_, state, meta) in els.items() if is_final(state) or RecoveryState.load(meta).closed}
        new = judge(cfg, {i: r for i, r in reports.items() if i in els}, previous, ended)
        now = time.time()
        for j in new:
            job_id, _, meta = els[j.index]
            kept = (meta.get(KEY) or {}).get("judgements") or []
            meta[KEY] = {**(meta.get(KEY) or {}), "judgements": [*kept, j.to_json()]}
            db.execute("UPDATE jobs SET meta=?, updated=? WHERE job_id=?", (json.dumps(meta), now, job_id))
            db.execute("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)",
                       (job_id, now, EVENT, json.dumps(j.to_json())))
    return new
