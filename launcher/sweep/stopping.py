"""Early stopping in ``launcher watch``: judge every sweep with ``early_stop``, end the elements
it stops.

Each watch pass, after the batched status refresh:

1. ``judge_sweeps``: for every sweep with an open element and an ``early_stop`` section, read
   the elements' reports (``launcher.sweep.reports``: bounded, one hung root never blocks the
   pass) and judge them (``launcher.sweep.judgements.record``: one write transaction against
   every judgement recorded before, so concurrent watchers make each judgement once).
2. For each open element with a recorded stop, the watch's per-job step calls
   ``stop_element`` before any recovery decision: under the element's claim, it cancels what
   the scheduler has of it through the backend's ``cancel`` (a Slurm array element is
   ``scancel <array>_<index>``, running or pending; an element launched as its own job is that
   job) and closes it as STOPPED with the judgement's reason. STOPPED is final: watch never
   resubmits it, and its cancelled attempt is no failure for ``launcher report``. A cancel
   that fails leaves the element open with its stop recorded: the next pass tries again.

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
from launcher.state.claims import claimed
from launcher.state.store import is_open
from launcher.sweep.early_stop import Judgement
from launcher.sweep.elements import element_job_id, sweep_rows
from launcher.sweep.judgements import judgements_of, record, stop_of
from launcher.sweep.reports import read_element_reports

CONFIGS_KEPT = 64  # parsed early-stop sections kept per process (one per sweep a watcher follows)
_configs: dict = {}  # spec text -> its EarlyStop (or None): a function of the text alone, so safe to share
# store -> {(job id, handle): reports of an element that had ended when they were read}: scoped to the
# store (two stores in one process never see each other's), and to the attempt (a reopened element's
# next attempt reports anew)
_settled: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


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


def judge_sweeps(app, jobs) -> list[Outcome]:
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


def judge_sweep(app, sweep_id: str) -> list[Outcome]:
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


def stop_element(app, job_id: str) -> Optional[Outcome]:
    """Carry out the stop recorded for JOB_ID, under its claim: cancel it through its backend,
    close it as STOPPED with the judgement's reason."""
    with claimed(app.store, job_id) as c:
        if c is None:
            return Outcome(job_id, "claimed", "another watcher is acting on it")
        j = stop_of(c.job.meta)
        if j is None or not is_open(c.job):
            return None
        closing = Closing(STOPPED, j.reason, "early_stopped", {"by": "early_stop", **j.to_json()})
        report = cancel_claimed(app, c, closing)
    if report.finished:
        return Outcome(job_id, "done", f"{report.finished.lower()} before early stopping ended it")
    if not report.ok:
        return Outcome(job_id, "control_plane", "early stop: could not cancel: " + "; ".join(report.errors))
    return Outcome(job_id, "stopped", j.reason)


def stop_close(job):
    """The decision for an attempt that ended of an element with a stop recorded: close it as
    STOPPED (nothing is left to cancel). None when no stop is recorded."""
    j = pending_stop(job)
    if j is None:
        return None
    return Close(STOPPED, j.reason, "early_stopped", {"by": "early_stop", **j.to_json()}, "stopped", j.reason)
