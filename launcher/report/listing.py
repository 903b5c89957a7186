"""The compute figures (MFU, effective MFU, the peak) of many jobs at once, within a time bound:
what a list of jobs shows beside each one (``launcher serve``'s jobs list, a sweep's elements).

Each job's figures are the ones its own report gives (``launcher.report.mfu.summarize`` over its
accounting, as ``launcher report JOB`` and the job's page compute them). Its checkpoint root (its
attempt records and the metrics it reported) is storage the launcher does not control: the roots
are read on a few worker threads against one deadline (``launcher.sweep.reports``), and a job whose
root did not answer in time has no figures this time, with the reason. Nothing here writes.
"""

from __future__ import annotations

from typing import Optional

from launcher.checkpoint import CheckpointError
from launcher.checkpoint.metrics import read_metrics
from launcher.core.errors import LauncherError
from launcher.report.accounting import account
from launcher.report.collect import _stored_spec, collect, read_generation_records
from launcher.report.mfu import no_mfu_reason, resolve_peak, summarize
from launcher.sweep.reports import read_element_reports
from launcher.backend.context import AppContext


def read_root(root: str, job_id: str, records_if=None) -> dict:
    """What JOB_ID's report needs from its checkpoint ROOT: {"metrics" (what it reported:
    ``launcher.checkpoint.metrics``), "records" (its attempt records; None when RECORDS_IF, given
    the metrics, says they are not needed), "notes"}. Safe on a worker thread."""
    notes: list = []
    metrics = root_metrics(root, notes)
    need = records_if is None or records_if(metrics)
    records = read_generation_records(root, job_id, notes) if need else None
    return {"records": records, "metrics": metrics, "notes": notes}


def root_metrics(root: Optional[str], notes: list) -> dict:
    """The metrics reported under ROOT, {} (and a note) when none or unreadable."""
    if not root:
        return {}
    try:
        return read_metrics(root)
    except (CheckpointError, OSError, ValueError) as e:
        notes.append(f"metrics under {root} unreadable (no MFU): {e}")
        return {}


def compute_from(app: AppContext, row, records: Optional[list], metrics: dict, specs: dict, history: bool = False,
                 now: Optional[float] = None):
    """(accounting, compute figures, notes) of ROW's job from its attempt RECORDS and METRICS as
    ``read_root`` read them (RECORDS None: read now; [] for a root not to be asked again) and the
    state store, refreshing nothing; SPECS: parsed specs by their stored text, shared."""
    hist, row, notes = collect(app, row.job_id, refresh=False, now=now, history=history, specs=specs,
                               records=records)
    acc = account(hist)
    return acc, summarize(acc, metrics or {}, _stored_spec(row, [], specs)), notes


def jobs_compute(app: AppContext, rows: list, timeout: Optional[float] = None, specs: Optional[dict] = None) -> dict:
    """{job id: compute figures} of ROWS (the state store's JobRows), each as its report gives
    them. Only a job with a peak and FLOPs reported is accounted for (``mfu.no_mfu_reason`` says
    why the others have no MFU, as their reports would); the roots are read on worker threads
    within TIMEOUT seconds in all, and a job whose root did not answer gets {"mfu": None,
    "reason": why, "unread": True}; one whose report could not be made {"mfu": None, "reason": why}.
    "lasting": True marks a job without MFU for a reason its stored spec and row give (no peak, no
    checkpoint root): it stays so, whatever the job does next."""
    specs = {} if specs is None else specs
    spec_of = {r.job_id: _stored_spec(r, [], specs) for r in rows}
    out, roots, ids = {}, {}, {}
    for i, r in enumerate(rows):
        spec = spec_of[r.job_id]
        why = resolve_peak(spec)[2] if r.ckpt_root else no_mfu_reason(spec, {})
        if why is not None:  # no peak, or no root to have reported FLOPs under: so while its spec stays
            out[r.job_id] = dict(_none(why), lasting=True)
        else:
            roots[i], ids[r.ckpt_root] = r.ckpt_root, r.job_id

    def reader(root: str) -> dict:
        spec = spec_of[ids[root]]
        return read_root(root, ids[root], records_if=lambda metrics: no_mfu_reason(spec, metrics) is None)

    read = read_element_reports(roots, timeout=timeout, reader=reader)
    for i in roots:
        row = rows[i]
        if i in read.problems:
            out[row.job_id] = dict(_none(read.problems[i]), unread=True)
            continue
        got = read.reports.get(i) or {}
        why = no_mfu_reason(spec_of[row.job_id], got.get("metrics") or {})
        if why is not None:
            out[row.job_id] = _none(why)
            continue
        try:
            out[row.job_id] = compute_from(app, row, got.get("records"), got.get("metrics") or {}, specs)[1]
        except (LauncherError, OSError, ValueError) as e:
            out[row.job_id] = _none(f"no report: {e}")
    return out


def _none(why: str) -> dict:
    return {"mfu": None, "effective_mfu": None, "reason": why}
