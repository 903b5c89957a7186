"""MFU and effective MFU of an accounted job (pure: an ``Accounting``, the job's reported
metrics and its spec in; one JSON-ready dict out).

The job reports its model FLOPs per step with ``jobside.report(step, flops=F)`` (F: the model
FLOPs of ONE step, the whole global batch, every rank together), or ``tokens=T`` (the tokens of
one step) with the spec's ``model.flops_per_token``. A report stands for the steps since the
previous report (a program that reports every 10 steps with flops=F did 10 F), and the last
report for the steps after it.

*Kept* FLOPs are the FLOPs of the steps whose results the job kept: for an attempt that was
interrupted, the steps from the one it resumed from up to the checkpoint the next attempt
resumed from (``AttemptOut.last_commit_step``); for the attempt that completed or still runs,
up to its latest reported or committed step. Those are exactly the steps whose time
``launcher.report.accounting`` counts as useful compute, so:

* ``mfu`` = kept FLOPs / (peak x accelerators x useful compute seconds): how well the program
  used the accelerators while it computed what was kept;
* ``effective_mfu`` = kept FLOPs / (peak x accelerators x paid seconds), paid = the allocation
  time of every attempt (``AttemptOut.billable_s``, what cost is charged for: the scheduler's
  start to end of each run);
* ``useful_share`` = useful compute / paid seconds; so effective_mfu = mfu x useful_share
  exactly (``goodput`` is useful compute / wall time, queue wait included).

The peak is named (``launcher.plan.peaks``): ``resources.peak_tflops`` when given, else the
table's dense figure for ``resources.accelerator`` at ``resources.precision``. An unknown name
gives ``peak: null``, ``mfu: null`` and the reason "peak unknown: NAME", never another part's peak.
"""

from __future__ import annotations

from typing import Mapping, Optional

from launcher.plan.peaks import Peak, PeakUnknown, custom_peak, peak as table_peak


def resolve_peak(spec) -> tuple[Optional[Peak], int, Optional[str]]:
    """(peak, accelerators, why there is no peak) from SPEC's resources (None: no spec)."""
    if spec is None:
        return None, 0, "the job's spec could not be read: no peak"
    r = spec.resources
    if r.peak_tflops is not None:
        n = r.nodes * r.gpus_per_node if r.gpus_per_node else r.nodes
        return custom_peak(r.peak_tflops, r.precision, r.accelerator), n, None
    if not r.accelerator:
        return None, 0, ("peak unknown: resources.accelerator is not set (set it, or resources.peak_tflops for a "
                         "CPU or a part not in `launcher peaks`)")
    try:
        p = table_peak(r.accelerator, r.precision)
    except PeakUnknown as e:
        return None, 0, str(e)
    if not r.gpus_per_node:
        return p, 0, f"resources.gpus_per_node is 0: how many {p.name} the job has is unknown"
    return p, r.nodes * r.gpus_per_node, None


def step_flops(metrics: Mapping, flops_per_token: Optional[float]) -> tuple[list, Optional[str]]:
    """([(step, FLOPs of one step)] ascending, why none) from {step: {metric: value}}."""
    points, tokens_only = [], False
    for step in sorted(metrics, key=int):
        m = metrics[step] or {}
        f = m.get("flops")
        if f is None and m.get("tokens") is not None:
            if flops_per_token is None:
                tokens_only = True
                continue
            f = m["tokens"] * flops_per_token
        if isinstance(f, (int, float)) and not isinstance(f, bool) and f >= 0:
            points.append((int(step), float(f)))
    if points:
        return points, None
    if tokens_only:
        return [], "the job reported tokens but the spec has no model.flops_per_token"
    return [], "no model FLOPs reported: jobside.report(step, flops=...) or tokens=... with model.flops_per_token"


def no_mfu_reason(spec, metrics: Mapping) -> Optional[str]:
    """Why a job has no MFU whatever its accounting holds (``summarize`` gives the same reason):
    no peak (``resolve_peak``), else no model FLOPs in METRICS (``step_flops``); None when it
    has both. A list of many jobs asks this before it accounts for any."""
    _peak, _n, why = resolve_peak(spec)
    return why or step_flops(metrics or {}, spec.model.flops_per_token if spec is not None else None)[1]


def flops_between(points: list, lo: int, hi: int) -> float:
    """The FLOPs of steps lo < s <= hi: each step costs the figure of the first report at or
    after it (the last report's for the steps after it)."""
    if hi <= lo or not points:
        return 0.0
    total, s = 0.0, lo
    for step, f in points:
        if step <= s:
            continue
        upto = min(step, hi)
        total += (upto - s) * f
        s = upto
        if s >= hi:
            return total
    return total + (hi - s) * points[-1][1]


def kept_ranges(attempts: list, points: list) -> list[dict]:
    """[{attempt, from_step, to_step}]: the steps each attempt computed and the job kept."""
    last_reported = points[-1][0] if points else None
    fresh = -1 if points and points[0][0] == 0 else 0  # step numbers count completed steps unless 0 is reported
    out, prev = [], fresh
    ran = [a for a in attempts if a.program_start is not None or a.started is not None]
    for i, a in enumerate(ran):
        lo = a.resume_step if a.resume_step is not None and a.resume_step >= 0 else (
            fresh if a.resume_step is not None else prev)
        committed = [s.step for s in a.saves if s.committed]
        if a.failed:
            hi = a.last_commit_step if a.last_commit_step is not None else lo
        elif i == len(ran) - 1:
            hi = max([lo, *committed, *([last_reported] if last_reported is not None else [])])
        else:
            hi = max([lo, *committed])
        out.append({"attempt": a.attempt, "from_step": lo, "to_step": max(lo, hi)})
        prev = max(lo, hi)
    return out


def summarize(acc, metrics: Mapping, spec) -> dict:
    """The compute figures of one job (see the module docstring)."""
    peak, n, why = resolve_peak(spec)
    points, no_flops = step_flops(metrics or {}, spec.model.flops_per_token if spec is not None else None)
    ranges = kept_ranges(acc.attempts, points)
    for r in ranges:
        r["flops"] = flops_between(points, r["from_step"], r["to_step"])
    kept = sum(r["flops"] for r in ranges)
    useful = acc.totals["useful_compute"]
    paid = sum(a.billable_s for a in acc.attempts)
    peak_flops = peak.tflops * 1e12 * n if peak is not None and n else 0.0
    reason = why or no_flops
    mfu = eff = None
    if reason is None:
        mfu = kept / (peak_flops * useful) if useful > 0 else None
        eff = kept / (peak_flops * paid) if paid > 0 else None
        if mfu is None:
            reason = "no useful compute yet"
    return {"mfu": mfu, "effective_mfu": eff, "useful_share": (useful / paid) if paid > 0 else None,
            "peak": peak.to_dict() if peak is not None else None,
            "peak_text": peak.describe() if peak is not None else None,
            "accelerators": n, "model_flops": kept if points else None, "useful_s": useful, "paid_s": paid,
            "peak_flops": peak_flops, "reason": reason, "kept": ranges}


def _ratio(x: float, y: float) -> Optional[float]:
    return x / y if y > 0 else None


def _left_out(parts: list, have: list) -> Optional[str]:
    """Why a sweep's MFU leaves elements out (or has none): the count, and the first reason an
    element gives."""
    reasons = sorted({p.get("reason") for p in parts if p and p.get("mfu") is None and p.get("reason")})
    if not have:
        return reasons[0] if reasons else "no element has a report"
    if len(have) < len(parts):
        return f"{len(parts) - len(have)} of {len(parts)} element(s) without MFU left out" + (
            f" ({reasons[0]})" if reasons else "")
    return None


def combine(parts: list) -> dict:
    """The compute figures of a sweep from its elements' ``summarize`` dicts: kept FLOPs and
    peak-seconds summed (so effective_mfu = mfu x useful_share holds here too)."""
    have = [p for p in parts if p and p.get("mfu") is not None]
    flops = sum(p["model_flops"] for p in have)
    useful = sum(p["peak_flops"] * p["useful_s"] for p in have)
    paid = sum(p["peak_flops"] * p["paid_s"] for p in have)
    peaks = {(p["peak"]["name"], p["peak"]["precision"], p["peak"]["tflops"]): p for p in have}
    one = next(iter(peaks.values())) if len(peaks) == 1 else None  # one peak for every element: named
    return {"mfu": _ratio(flops, useful), "effective_mfu": _ratio(flops, paid), "useful_share": _ratio(useful, paid),
            "peak": one["peak"] if one else None, "peak_text": one["peak_text"] if one else None,
            "mixed_peaks": len(peaks) > 1,  # the elements' MFU is against different peaks: none is named
            "model_flops": flops if have else None, "elements": len(have), "reason": _left_out(parts, have)}
