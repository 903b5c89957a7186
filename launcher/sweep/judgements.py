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

from typing import Mapping, Optional

from launcher.core.status import is_final
from launcher.state.rows import meta_closed
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


def record(store, sweep_id: str, cfg: EarlyStop, reports: Mapping[int, Mapping]) -> list[Judgement]:
    """Judge SWEEP_ID's elements on REPORTS (index -> {step: {metric: value}}) against every
    judgement recorded so far, and record the new ones (returned) with their events, in the
    one transaction that read them (``StateStore.update_elements``)."""
    new: list[Judgement] = []

    def judged(els: dict) -> list:
        previous = [j for _, _, meta in els.values() for j in judgements_of(meta)]
        ended = {i for i, (_, state, meta) in els.items() if is_final(state) or meta_closed(meta)}
        new[:] = judge(cfg, {i: r for i, r in reports.items() if i in els}, previous, ended)
        writes = []
        for j in new:
            job_id, _, meta = els[j.index]
            kept = (meta.get(KEY) or {}).get("judgements") or []
            meta[KEY] = {**(meta.get(KEY) or {}), "judgements": [*kept, j.to_json()]}
            writes.append((job_id, meta, EVENT, j.to_json()))
        return writes

    store.sweeps.update_elements(sweep_id, judged)
    return new
