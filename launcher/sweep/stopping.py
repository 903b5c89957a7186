"""Early stopping in ``launcher watch``: judge every sweep with ``early_stop``, end the elements
it stops.

Each watch pass, after the batched status refresh:

1. ``judge_sweeps``: for every sweep with an open element and an ``early_stop`` section, read
   the elements' reports (``launcher.sweep.reports``: bounded, one hung root never blocks the
   pass) and judge them (``launcher.sweep.judgements.record``: one write transaction against
   every judgement recorded before, so concurrent watchers make each judgement once).
2. ``stop_elements``: every open element of the pass with a recorded stop (judged now or in
   an earlier pass whose cancel failed) is stopped in ONE batch, under the elements' claims:
   one dedupe lookup and one cancel per target for all of them (``CancelsMany``: the local
   backend signals every element and waits one grace period for all, Slurm runs one
   ``scancel`` naming each ``<array>_<index>``, running or pending; an element launched as its
   own job is that job), one status call per target, then each element is closed as STOPPED
   with its judgement's reason, in one store transaction. N stops in a pass so cost about one
   grace period, not N. STOPPED is final: watch never resubmits it, and its cancelled attempt
   is no failure for ``launcher report``. A cancel that fails leaves the element open with its
   stop recorded: the next pass tries again.
3. The watch's per-job step (``act_first``) reports what the batch did to an element it left
   open, and stops on its own (``stop_element``) an element the batch did not take (its claim
   was held by another watcher, or the batch could not run).

An element pending in its array for a slot of ``max_parallel`` (never started) has reported
nothing, so successive halving does not judge it (``early_stop.judge``): it is not stopped for
what the others reported; it starts when a slot frees (often a stopped element's) and is
judged when it reaches the rung. Only an element that reported and then went back to pending
(a requeue) can be stopped while pending: its pending task is cancelled like a running one.
"""

from __future__ import annotations

import weakref
from typing import Optional

from launcher.backend.sections import spec_from_text
from launcher.core.errors import LauncherError
from launcher.core.status import STOPPED
from launcher.recovery.cancel import Closing, cancel_claimed
from launcher.recovery.decide import Close
from launcher.recovery.outcome import Outcome
from launcher.state.claims import claim_ttl, claimed
from launcher.state.store import is_open
from launcher.sweep.cancelling import cancel_claimed_many
from launcher.sweep.early_stop import Judgement
from launcher.sweep.elements import element_job_id, sweep_rows
from launcher.sweep.judgements import judgements_of, record, stop_of
from launcher.sweep.reports import read_element_reports
from launcher.backend.context import AppContext

CONFIGS_KEPT = 64  # parsed early-stop sections kept per process (one per sweep a watcher follows)
_configs: dict = {}  # spec text -> its EarlyStop (or None): a function of the text alone, so safe to share
# store -> {(job id, handle): reports of an element that had ended when they were read}: scoped to the
# store (two stores in one process never see each other's), and to the attempt (a reopened element's
# next attempt reports anew)
_settled: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# store -> {job id: outcome} of the elements this pass's batch of stops left open (their cancel
# failed): the pass's per-job step reports it, and does not cancel again. Reset by every batch.
_left_open: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def early_stop_of(row):
    """The ``sweep.early_stop`` section of the spec element ROW was launched with (None: none)."""
    text = row.spec_yaml
    if text not in _configs:
        spec = spec_from_text(text, row.spec_path or row.job_id)
        if len(_configs) >= CONFIGS_KEPT:
            _configs.clear()
        _configs[text] = spec.sweep.early_stop if spec.sweep else None
    return _configs[text]


def settled_of(store) -> dict:
    """STORE's {(job id, handle): reports} of ended elements (read once: they report no more)."""
    got = _settled.get(store)
    if got is None:
        got = _settled[store] = {}
    return got


def judge_sweeps(app: AppContext, jobs) -> list[Outcome]:
    """Judge every sweep with an open element among JOBS (the pass's open jobs)."""
    sweeps = sorted({j.meta["sweep"]["id"] for j in jobs if j.meta.get("sweep")})
    out: list[Outcome] = []
    for sweep_id in sweeps:
        try:
            out += judge_sweep(app, sweep_id)
        except LauncherError as e:
            out.append(Outcome(sweep_id, "control_plane", f"early stop: {e}"))
    return out


def _unsettled(row, rungs) -> bool:
    """Whether the element may still be judged at a rung: not stopped, not judged at every rung."""
    js = judgements_of(row.meta)
    return not any(j.stop for j in js) and {j.rung for j in js} != set(rungs)


def judge_sweep(app: AppContext, sweep_id: str) -> list[Outcome]:
    rows = sweep_rows(app.store, sweep_id)
    cfg = early_stop_of(rows[0]) if rows else None
    if cfg is None:
        return []
    todo = {r.meta["sweep"]["index"]: r for r in rows if r.ckpt_root and _unsettled(r, cfg.rungs)}
    settled = settled_of(app.store)
    cached = {i: settled[(r.job_id, r.handle)] for i, r in todo.items() if (r.job_id, r.handle) in settled}
    read = read_element_reports({i: r.ckpt_root for i, r in todo.items() if i not in cached})
    for i, reports in read.reports.items():
        if not is_open(todo[i]):  # ended before the read began: its reports are complete
            settled[(todo[i].job_id, todo[i].handle)] = reports
    out = [Outcome(element_job_id(sweep_id, i), "waiting", f"early stop: {why}")
           for i, why in sorted(read.problems.items())]
    for j in record(app.store, sweep_id, cfg, {**read.reports, **cached}):
        out.append(Outcome(element_job_id(sweep_id, j.index), "early_stop", j.reason))
    return out


def pending_stop(row) -> Optional[Judgement]:
    """The stop recorded for open element ROW that has not been carried out yet."""
    return stop_of(row.meta) if row.meta.get("sweep") and is_open(row) else None


def judge_and_stop(app: AppContext, jobs) -> list[Outcome]:
    """A watch pass's early stopping: judge every sweep among JOBS (the pass's open jobs), then
    carry out every stop recorded for them in one batch."""
    return judge_sweeps(app, jobs) + stop_elements(app, jobs)


def _closing(j: Judgement) -> Closing:
    return Closing(STOPPED, j.reason, "early_stopped", {"by": "early_stop", **j.to_json()})


def _outcome(job_id: str, j: Judgement, report) -> Outcome:
    if report.finished:
        return Outcome(job_id, "done", f"{report.finished.lower()} before early stopping ended it")
    if not report.ok:
        return Outcome(job_id, "control_plane", "early stop: could not cancel: " + "; ".join(report.errors))
    return Outcome(job_id, "stopped", j.reason)


def stop_elements(app: AppContext, jobs) -> list[Outcome]:
    """Stop every open element among JOBS with a recorded stop, in one batch (see the module's
    docstring): an outcome for each element closed STOPPED. An element whose cancel failed
    stays open and its outcome waits for the pass's per-job step (``carried_out``); one whose
    claim another watcher holds is left to that step. A batch that cannot run (a target that
    cannot be loaded) leaves every element to that step."""
    store = app.store
    left = _left_open[store] = {}
    ids = {j.job_id for j in jobs if j.meta.get("sweep") and j.handle}
    sweeps = sorted({j.meta["sweep"]["id"] for j in jobs if j.job_id in ids})
    claims: dict = {}
    stops: dict = {}
    try:
        for sweep_id in sweeps:
            for row in sweep_rows(store, sweep_id):  # read again: the judgements just recorded
                if row.job_id not in ids or pending_stop(row) is None:
                    continue
                c = store.claim(row.job_id, ttl=claim_ttl())
                if c is None:
                    continue  # another watcher acts on it: the per-job step says so
                j = stop_of(c.job.meta)
                if j is None or not is_open(c.job):
                    store.release(row.job_id, c.owner)
                    continue
                claims[row.job_id], stops[row.job_id] = c, j
        if not claims:
            return []
        try:
            reports = cancel_claimed_many(app, claims, {k: _closing(j) for k, j in stops.items()},
                                          check_active=True)
        except LauncherError:
            return []  # each element is stopped on its own by the per-job step, which reports why not
    finally:
        for job_id, c in claims.items():
            store.release(job_id, c.owner)
    out = []
    for job_id, report in reports.items():
        o = _outcome(job_id, stops[job_id], report)
        if is_open(store.get_job(job_id)):
            left[job_id] = o
        else:
            out.append(o)
    return out


def carried_out(app: AppContext, job_id: str) -> Optional[Outcome]:
    """The outcome of this pass's batched stop of JOB_ID if the batch left it open (its cancel
    failed), once; None if the batch did not take it."""
    return _left_open.get(app.store, {}).pop(job_id, None)


def stop_element(app: AppContext, job_id: str) -> Optional[Outcome]:
    """Carry out the stop recorded for JOB_ID alone, under its claim: cancel it through its
    backend, close it as STOPPED with the judgement's reason. (A pass stops its elements in
    one batch, ``stop_elements``; this is for one the batch did not take.)"""
    with claimed(app.store, job_id) as c:
        if c is None:
            return Outcome(job_id, "claimed", "another watcher is acting on it")
        j = stop_of(c.job.meta)
        if j is None or not is_open(c.job):
            return None
        report = cancel_claimed(app, c, _closing(j))
    return _outcome(job_id, j, report)


def stop_close(job):
    """The decision for an attempt that ended of an element with a stop recorded: close it as
    STOPPED (nothing is left to cancel). None when no stop is recorded."""
    j = pending_stop(job)
    if j is None:
        return None
    return Close(STOPPED, j.reason, "early_stopped", {"by": "early_stop", **j.to_json()}, "stopped", j.reason)
