"""``launcher report SWEEP``: a sweep's wall time, goodput and cost summed over its elements,
and its best element. Pure: element reports and metrics in, one JSON-ready dict out.

Every element is its own job (``launcher.sweep.arrays``, ``launcher.sweep.one_by_one``), so each has the report of
``launcher.report`` (categories that add up to its wall time, its cost). The sweep's
figures are sums over its elements: ``wall_s`` is element-seconds (an element's wall time
runs from its first submission to the end of its last attempt), each category sums the
same way, so the categories still add up to ``wall_s``; goodput is the summed useful
compute over ``wall_s``. ``span`` is the sweep's own elapsed time, first submission to
last end, which is shorter when elements ran side by side.

The best element is ranked by one metric reported with ``jobside.report(step, NAME=v)``:
``--metric NAME --mode min|max`` when given, else the sweep's ``early_stop`` metric and
mode. Each element's value is its latest report of that metric (``scope="last"``, what
its run ended with) or the best of all its reports (``scope="best"``). Every element with
a value is ranked, whatever its state (the table shows the state); ties go to the lower
index. With no metric to rank by, or none reported, ``best`` is None and ``best_reason``
says why and what to pass.

The JSON shape (``launcher report SWEEP --json``, ``Launcher.report_sweep``)::

    {"sweep": ID, "size": N, "counts": {STATE: n},
     "wall_s": element-seconds, "categories": {CATEGORY: s}, "percent": {CATEGORY: %}, "sum_s": s,
     "goodput_pct": %, "span": {"t0", "t_end", "elapsed_s", "open"},
     "goodput": fraction, "mfu", "effective_mfu": fractions over the elements with MFU (kept FLOPs and
     peak-seconds summed: launcher.report.mfu.combine), "peak": {"name", "precision", "tflops", "source"} or null
     (null when elements differ: then "compute" has "mixed_peaks": true), "compute": the details,
     "cost": {"total_usd", "complete", "priced", "useful_gpu_hours", "usd_per_useful_gpu_hour", "reason"},
     "metric": {"name", "mode", "scope", "source"} or null, "reported_metrics": [NAME],
     "best": {"index", "job_id", "params", "state", "metric", "metric_step", "final_step", "cost_usd",
              "goodput_pct"} or null, "best_reason": str or null,
     "elements": [{"index", "job_id", "params", "state", "reason", "attempts", "wall_s", "categories",
                   "goodput_pct", "cost_usd", "cost_complete", "useful_gpu_hours", "mfu", "effective_mfu", "mfu_reason",
                   "peak",
                   "final_step", "metric", "metric_step", "reported", "metrics_read"}],
     "metrics_unread": [index whose root did not answer within $LAUNCHER_STORAGE_TIMEOUT],
     "notes": [str]}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

from launcher.core.errors import EXIT_USAGE, LauncherError
from launcher.report.accounting import CATEGORIES
from launcher.report.clocks import combine_totals
from launcher.report.mfu import combine
from launcher.sweep.summary import STATE_ORDER

SCOPES = ("last", "best")


class ReportUsageError(LauncherError):
    """A report option is missing or contradicts another one."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class MetricChoice:
    name: str
    mode: str  # "min" or "max"
    scope: str = "last"
    source: str = "--metric"  # where name and mode came from

    def to_dict(self) -> dict:
        return {"name": self.name, "mode": self.mode, "scope": self.scope, "source": self.source}


@dataclass
class ElementIn:
    """One element as the report sees it: its row's facts, its own report (the dict of
    ``JobReport.to_dict``, None when it could not be made) and its reported metrics."""

    index: int
    params: Mapping
    state: str
    job_id: str = ""
    reason: Optional[str] = None
    report: Optional[dict] = None
    metrics: Mapping = field(default_factory=dict)  # {step: {metric: value}}
    last_step: Optional[int] = None  # the latest committed step the state store knows of
    notes: list = field(default_factory=list)
    metrics_read: bool = True  # False: its root did not answer in time (its metric is unknown)


def choose_metric(metric: Optional[str], mode: Optional[str], early_stop=None, scope: str = "last") \
        -> Optional[MetricChoice]:
    """What to rank by: --metric/--mode, completed from EARLY_STOP (the sweep's early_stop
    section, or None) where one is missing. None: nothing to rank by."""
    if scope not in SCOPES:
        raise ReportUsageError(f"--scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if mode is not None and mode not in ("min", "max"):
        raise ReportUsageError(f"--mode must be min or max, got {mode!r}")
    es_metric = getattr(early_stop, "metric", None)
    es_mode = getattr(early_stop, "mode", None)
    if metric is None and mode is None:
        return MetricChoice(es_metric, es_mode, scope, "the sweep's early_stop") if es_metric else None
    if metric is None:
        if not es_metric:
            raise ReportUsageError("--mode needs --metric NAME (the sweep has no early_stop metric)")
        return MetricChoice(es_metric, mode, scope, "the sweep's early_stop metric, --mode")
    if mode is None:
        if metric != es_metric:
            raise ReportUsageError(f"--metric {metric} needs --mode min or --mode max (is a lower or a higher "
                                   f"{metric} better?)")
        return MetricChoice(metric, es_mode, scope, "--metric, the sweep's early_stop mode")
    return MetricChoice(metric, mode, scope)


def element_value(metrics: Mapping, choice: MetricChoice) -> tuple[Optional[float], Optional[int]]:
    """(value, step) of CHOICE's metric in one element's {step: {metric: value}}: its latest
    report (scope last) or its best one (scope best; the earliest step on a tie)."""
    seen = []
    for step in sorted(metrics, key=int):
        v = (metrics[step] or {}).get(choice.name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            seen.append((float(v), int(step)))
    if not seen:
        return None, None
    if choice.scope == "last":
        return seen[-1]
    sign = 1.0 if choice.mode == "min" else -1.0
    return min(seen, key=lambda vs: (sign * vs[0], vs[1]))


def best_index(values: Mapping[int, Optional[float]], mode: str) -> Optional[int]:
    """The index with the best value (ties: the lower index); None when no element has one."""
    have = [(v if mode == "min" else -v, i) for i, v in values.items() if v is not None]
    return min(have)[1] if have else None


def reported_names(elements) -> list[str]:
    return sorted({k for e in elements for m in (e.metrics or {}).values() for k in (m or {})})


def element_row(e: ElementIn, choice: Optional[MetricChoice]) -> dict:
    r = e.report or {}
    cost = r.get("cost") or {}
    value, at = element_value(e.metrics, choice) if choice else (None, None)
    return {"index": e.index, "job_id": e.job_id, "params": dict(e.params), "state": e.state, "reason": e.reason,
            "attempts": len(r.get("attempts", [])), "wall_s": r.get("wall_s"),
            "categories": dict(r.get("categories") or {}), "goodput_pct": r.get("goodput_pct"),
            "cost_usd": cost.get("total_usd"), "cost_complete": bool(cost.get("complete")) if cost else False,
            "useful_gpu_hours": cost.get("useful_gpu_hours") or 0.0,
            "mfu": (r.get("compute") or {}).get("mfu"), "effective_mfu": (r.get("compute") or {}).get("effective_mfu"),
            "mfu_reason": (r.get("compute") or {}).get("reason"),  # why there is no MFU (launcher.report.mfu)
            "peak": (r.get("compute") or {}).get("peak"),  # the peak its MFU is against (None: unknown)
            # the element's one step (its row's last committed step, as `launcher status JOB` shows it:
            # launcher.state.rows.job_step); a reported step is the metric's, beside it
            "final_step": e.last_step, "last_step": e.last_step, "metric": value, "metric_step": at,
            "reported": e.report is not None, "metrics_read": e.metrics_read}


def _counts(rows) -> dict:
    counts: dict = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    out = {s: counts[s] for s in STATE_ORDER if s in counts}
    out.update({s: counts[s] for s in sorted(counts) if s not in out})
    return out


def _totals(rows, reports) -> dict:
    cats = {c: sum((r["categories"].get(c) or 0.0) for r in rows) for c in CATEGORIES}
    wall = sum(r["wall_s"] or 0.0 for r in rows)
    t0s = [d["t0"] for d in reports if d.get("t0") is not None]
    ends = [d["t_end"] for d in reports if d.get("t_end") is not None]
    return {"wall_s": wall, "categories": cats,
            "percent": {c: (100.0 * v / wall if wall > 0 else None) for c, v in cats.items()},
            "sum_s": sum(cats.values()),
            "goodput_pct": (100.0 * cats["useful_compute"] / wall) if wall > 0 else None,
            "span": {"t0": min(t0s, default=None), "t_end": max(ends, default=None),
                     "elapsed_s": (max(ends) - min(t0s)) if t0s and ends else None,
                     "open": any(d.get("open") for d in reports)}}


def _cost(rows) -> dict:
    known = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    total = sum(known) if known else None
    useful_gpu_h = sum(r["useful_gpu_hours"] for r in rows)
    reason = None
    if total is None:
        reason = "no price: the target has no gpu_hour_usd and no attempt has a recorded cost"
    elif len(known) < len(rows) or not all(r["cost_complete"] for r in rows):
        reason = f"{len(rows) - sum(1 for r in rows if r['cost_complete'])} element(s) without a price for " \
                 f"every attempt: the total is a lower bound"
    return {"total_usd": total, "complete": total is not None and reason is None, "priced": len(known),
            "useful_gpu_hours": useful_gpu_h,
            "usd_per_useful_gpu_hour": (total / useful_gpu_h) if total is not None and useful_gpu_h > 0 else None,
            "reason": reason}


def _best(rows, choice: Optional[MetricChoice], names: list[str]) -> tuple:
    reported = f"reported: {', '.join(names)}" if names else \
        "no element reported a metric with jobside.report(step, NAME=value)"
    if choice is None:
        return None, ("no metric to rank by (the sweep has no early_stop): pass --metric NAME --mode min|max "
                      f"({reported})")
    i = best_index({r["index"]: r["metric"] for r in rows}, choice.mode)
    if i is None:
        return None, f"no element reported {choice.name} ({reported})"
    r = next(r for r in rows if r["index"] == i)
    return {k: r[k] for k in ("index", "job_id", "params", "state", "metric", "metric_step", "final_step",
                              "cost_usd", "goodput_pct")}, None


def aggregate(sweep_id: str, elements, choice: Optional[MetricChoice] = None, notes=()) -> dict:
    """The sweep report (see the module docstring) of ELEMENTS (ElementIn, any order)."""
    elements = sorted(elements, key=lambda e: e.index)
    rows = [element_row(e, choice) for e in elements]
    names = reported_names(elements)
    best, why = _best(rows, choice, names)
    out = {"sweep": sweep_id, "size": len(rows), "counts": _counts(rows)}
    out.update(_totals(rows, [e.report for e in elements if e.report]))
    out["clocks_total"] = combine_totals([(e.report or {}).get("clocks_total") for e in elements])
    compute = combine([(e.report or {}).get("compute") for e in elements])
    out.update(mfu=compute["mfu"], effective_mfu=compute["effective_mfu"], peak=compute["peak"],
               goodput=out["goodput_pct"] / 100.0 if out["goodput_pct"] is not None else None, compute=compute)
    unread = [e.index for e in elements if not e.metrics_read]
    out.update(cost=_cost(rows), metric=choice.to_dict() if choice else None, reported_metrics=names,
               best=best, best_reason=why, elements=rows, metrics_unread=unread,
               notes=[*notes, *unread_note(unread, best is not None), *grouped_notes(elements)])
    return out


def unread_note(unread, ranked: bool) -> list[str]:
    """The line naming the elements whose roots did not answer in time (none: no line)."""
    if not unread:
        return []
    return [f"metrics of element{'s' if len(unread) > 1 else ''} {index_ranges(unread)} could not be read within "
            f"$LAUNCHER_STORAGE_TIMEOUT: {'the best element is among the others only' if ranked else 'not ranked'}"]


def index_ranges(indices) -> str:
    """"0-3, 7, 9-10" for [0, 1, 2, 3, 7, 9, 10]."""
    out, run = [], []
    for i in sorted(set(indices)):
        if run and i != run[-1] + 1:
            out.append(run)
            run = []
        run.append(i)
    if run:
        out.append(run)
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in out)


def grouped_notes(elements) -> list[str]:
    """Each element's notes, one line per distinct text naming every element it is about (the
    texts say "the element" and "its root", so 1,000 elements without records make one line)."""
    by_text: dict = {}
    for e in elements:
        for n in e.notes:
            by_text.setdefault(n, []).append(e.index)
    return [f"element{'s' if len(ix) > 1 else ''} {index_ranges(ix)}: {n}" for n, ix in by_text.items()]
