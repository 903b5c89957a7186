"""The deadline part of ``launcher report JOB`` (a spec with ``cost.deadline``, issue 21).

The deadline (absolute, and from the job's submission), when the job finished against it,
the billed hours per kind of capacity (spot, on-demand, a scheduler's queue) and their cost, and what
the same work would have cost on on-demand only: the work (``resources.expected_runtime``,
the planner's estimate) times the cheapest on-demand price among the spec's targets, as
``bench/deadline_replay.py`` normalizes its costs.

An attempt's kind is where ``launcher watch`` placed it (``launcher.recovery.deadline``
records it in the job's meta), else what its handle recorded at launch (``use_spot``), else
its target's capacity as the planner sees it.
"""

from __future__ import annotations

import datetime
import json
from typing import Optional

from launcher.plan import deadline as dl
from launcher.plan.ranking import params_for, work_estimate
from launcher.plan.sources import gather_offers
from launcher.backend.context import AppContext


def attempt_kind(attempt: int, handle: Optional[str], placements: dict, target_kinds: dict, target: str) -> str:
    moved = placements.get(str(attempt))
    if moved:
        return dl.stored_kind(moved.partition(":")[0])
    try:
        extra = json.loads(handle or "{}").get("extra", {})
    except ValueError:
        extra = {}
    if "use_spot" in extra:
        return "spot" if extra["use_spot"] else "on_demand"
    return target_kinds.get(target, "other")


def summarize(deadline_at: float, submitted: float, finished: Optional[float], work_h: float,
              od_price: Optional[float], per_attempt: list) -> dict:
    """Pure: PER_ATTEMPT is [{"kind", "billable_s", "usd"}]; the hours and dollars per kind,
    the on-demand-only cost of WORK_H at OD_PRICE ($/h) and whether FINISHED met the deadline."""
    hours: dict = {}
    usd: dict = {}
    for a in per_attempt:
        hours[a["kind"]] = hours.get(a["kind"], 0.0) + (a.get("billable_s") or 0.0) / 3600.0
        if a.get("usd") is not None:
            usd[a["kind"]] = usd.get(a["kind"], 0.0) + a["usd"]
    od_only = work_h * od_price if od_price is not None else None
    total = sum(usd.values()) if usd else None
    return {"deadline_at": deadline_at, "deadline_h": (deadline_at - submitted) / 3600.0,
            "finished_at": finished, "met": None if finished is None else finished <= deadline_at,
            "margin_h": None if finished is None else (deadline_at - finished) / 3600.0,
            "spot_hours": hours.get("spot", 0.0), "on_demand_hours": hours.get("on_demand", 0.0),
            "queue_hours": hours.get(dl.QUEUE, 0.0), "hours": hours, "usd": usd, "total_usd": total,
            "work_h": work_h, "on_demand_price": od_price, "on_demand_only_usd": od_only,
            "vs_on_demand_only": (total / od_only) if (total is not None and od_only) else None,
            "moves": None}


def collect_deadline(app: AppContext, row, spec, accounting_dict: dict) -> Optional[dict]:
    """The deadline summary of ROW (None when its spec has no ``cost.deadline``)."""
    if spec is None or spec.cost.deadline is None:
        return None
    kinds: dict = {}
    prices: dict = {}
    od: list = []
    try:
        offers = gather_offers(spec, app.config, targets=list(spec.targets) or [row.target]).offers
    except Exception:  # noqa: BLE001 - the config may have changed since: hours without prices
        offers = []
    for o in offers:
        d = dl.offer_of(o, spec.resources.nodes)
        if d is None:
            continue
        kinds.setdefault(o.target, d.kind)
        prices.setdefault(o.target, d.price)
        if d.kind == dl.ON_DEMAND:
            od.append(d.price)
    meta = row.meta.get("deadline") or {}
    handles = {a.attempt: (a.handle, a.target) for a in app.store.attempts(row.job_id)}
    per = []
    for p in accounting_dict.get("cost", {}).get("per_attempt", []):
        handle, target = handles.get(p["attempt"], (None, row.target))
        usd, source = p.get("usd"), p.get("source")
        if usd is None and p.get("billable_s") is not None and target in prices:
            # no price recorded at submit: the target's offer now (a replayed price may have moved since)
            usd, source = p["billable_s"] / 3600.0 * prices[target], f"{target}: ${prices[target]:.4g}/h offered now"
        per.append({"attempt": p["attempt"], "billable_s": p.get("billable_s"), "usd": usd, "source": source,
                    "kind": attempt_kind(p["attempt"], handle, meta.get("placements", {}), kinds, target)})
    finished = accounting_dict.get("t_end") if row.state == "COMPLETED" else None
    out = summarize(spec.cost.deadline_at(row.created), row.created, finished,
                    work_estimate(spec, params_for(spec))[0], min(od) if od else None, per)
    out["moves"] = sum(1 for e in app.store.events(row.job_id) if e["kind"] == "deadline_move")
    out["per_attempt"] = per
    return out


def deadline_lines(d: Optional[dict]) -> list:
    if not d:
        return []
    at = datetime.datetime.fromtimestamp(d["deadline_at"], datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    met = {True: f"met, {d['margin_h'] * 3600:.0f}s to spare", False: f"missed by {-d['margin_h'] * 3600:.0f}s",
           None: "not finished"}[d["met"]]
    out = [f"deadline {at} ({d['deadline_h']:.4g} h after submission): {met}; {d['moves']} move(s)",
           f"  hours: spot {d['spot_hours']:.4f}, on-demand {d['on_demand_hours']:.4f}"
           + (f", queue {d['queue_hours']:.4f}" if d["queue_hours"] else "")]
    if d["on_demand_only_usd"] is not None:
        total = f"${d['total_usd']:.4f}" if d["total_usd"] is not None else "-"
        ratio = f" ({100 * d['vs_on_demand_only']:.1f}% of it)" if d["vs_on_demand_only"] is not None else ""
        out.append(f"  cost {total}; on-demand only: ${d['on_demand_only_usd']:.4f} "
                   f"({d['work_h']:.4g} h of work at ${d['on_demand_price']:.4g}/h){ratio}")
    return out
