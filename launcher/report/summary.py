"""What an accounted job cost and how often it checkpointed, against the optimum (pure).

``cost_summary`` and ``checkpoint_interval`` read the per-attempt results and category
totals of ``launcher.report.accounting.account``.
"""

from __future__ import annotations

from typing import Optional

from launcher.plan.model import daly, optimal_interval, young

NOT_FAILURES = {"COMPLETED", "CANCELLED"}  # CANCELLED loses work, but is no failure for the MTBF


# ---------------------------------------------------------------- cost
def cost_summary(outs, totals, gpus: int) -> dict:
    known = [a.cost_usd for a in outs if a.cost_usd is not None]
    total = sum(known) if known else None
    useful_gpu_h = totals["useful_compute"] / 3600.0 * gpus if gpus else 0.0
    per = total / useful_gpu_h if (total is not None and useful_gpu_h > 0) else None
    why = None
    if total is None:
        why = "no price: the target has no gpu_hour_usd and no attempt has a recorded cost"
    elif not gpus:
        why = "the job uses no GPUs"
    elif useful_gpu_h <= 0:
        why = "no useful compute yet"
    return {"total_usd": total, "complete": len(known) == len(outs), "gpus": gpus,
            "useful_gpu_hours": useful_gpu_h, "usd_per_useful_gpu_hour": per, "reason": why,
            "per_attempt": [{"attempt": a.attempt, "usd": a.cost_usd, "source": a.cost_source,
                             "billable_s": a.billable_s} for a in outs]}


# ---------------------------------------------------------------- checkpoint interval
def _cost_tier(captures) -> Optional[str]:
    """Where the periodic saves behind C went: 'local' (a local tier), 'durable', 'mixed'
    (a local tier with synchronous fallbacks to the root), None (no save)."""
    if not captures:
        return None
    return "local" if all(captures) else "durable" if not any(captures) else "mixed"


def _mean(xs: list) -> Optional[float]:
    return (sum(xs) / len(xs)) if xs else None


def _periodic_gaps(outs) -> list:
    """The compute time between consecutive committed periodic saves, within each attempt."""
    gaps = []
    for a in outs:
        periodic = [s for s in a.saves if s.committed and not s.preempt]
        gaps.extend(max(0.0, q.start - p.end) for p, q in zip(periodic, periodic[1:]))
    return gaps


def _save_costs(outs) -> tuple[list, list]:
    """(how long each committed periodic save blocked training, the same for each save on a
    preemption notice)."""
    costs, notice_costs = [], []
    for a in outs:
        for s in a.saves:
            if s.committed:
                (notice_costs if s.preempt else costs).append(max(0.0, s.end - s.start))
    return costs, notice_costs


def _exposure(outs) -> float:
    """The seconds the job was exposed to failure: every second its program ran."""
    return sum(a.seconds["useful_compute"] + a.seconds["checkpoint_overhead"] + a.seconds["capture_stall"]
               + a.seconds["lost_work"] for a in outs)


def _optimum(C: float, M: float, restart_s: Optional[float], failures: list, failed_runs: int,
             notice_costs: list) -> dict:
    """The optimal interval for save cost C and MTBF M: Young's, Daly's and the model's, which
    counts the restart RESTART_S and the fraction of the FAILED_RUNS (the FAILURES, and the runs
    rerun in the job) that had a committed save on notice."""
    C_eff = max(C, 1e-6)
    out = {"young_s": young(C_eff, M), "daly_s": daly(C_eff, M)}
    noticed = sum(1 for a in failures if any(s.preempt and s.committed for s in a.saves))
    p = noticed / failed_runs
    out["notice_fraction"] = p
    Ce = _mean(notice_costs)
    h = 3600.0
    try:
        tau = optimal_interval(C_eff / h, h / M, (restart_s or 0.0) / h, p, (Ce / h) if Ce else None)
        out["optimal_s"] = tau * h if tau != float("inf") else None
    except (ValueError, ZeroDivisionError, OverflowError):
        out["optimal_s"] = None
    return out


def checkpoint_interval(outs, totals, planned_s: Optional[float] = None) -> dict:
    """The compute time between periodic commits actually achieved, against the optimum for
    the observed failure rate (Young 1974, Daly 2006; ``launcher.plan.model``). The save cost C is
    the time training was blocked per save: with a local tier (``checkpoint.local``), the local
    save's (its ``end`` is when training went on; the drain runs beside it)."""
    gaps = _periodic_gaps(outs)
    costs, notice_costs = _save_costs(outs)
    failures = [a for a in outs if a.failed and a.state not in NOT_FAILURES]
    exposure = _exposure(outs)
    # a run rerun in the job (recovery.in_job) is a failure too, its restart the in-job restart's time
    restart_total = totals["restart_overhead"] + totals.get("in_job_restart", 0.0)
    failed_runs = len(failures) + sum(a.in_job_restarts for a in outs)
    out = {"achieved_s": _mean(gaps), "intervals": len(gaps),
           "planned_s": planned_s,
           "checkpoint_cost_s": _mean(costs), "saves": len(costs),
           "cost_tier": _cost_tier([s.capture for a in outs for s in a.saves if s.committed and not s.preempt]),
           "notice_saves": len(notice_costs), "failures": failed_runs, "exposure_s": exposure,
           "mtbf_s": (exposure / failed_runs) if failed_runs else None,
           "restart_s": (restart_total / failed_runs) if failed_runs else None,
           "young_s": None, "daly_s": None, "optimal_s": None, "reason": None}
    C, M = out["checkpoint_cost_s"], out["mtbf_s"]
    if C is None:
        out["reason"] = "no committed periodic checkpoint: the checkpoint cost is unknown"
    elif M is None:
        out["reason"] = "no failure observed: the optimum is unbounded (checkpoint as rarely as you like)"
    else:
        out.update(_optimum(C, M, out["restart_s"], failures, failed_runs, notice_costs))
    return out
