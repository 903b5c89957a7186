"""``launcher plan``'s table: a ranked PlanResult as text (pure; the rows, the excluded
offers with why, the notes)."""

from __future__ import annotations

import math

from launcher.spec.units import format_hours


def _money(x: float) -> str:
    if math.isinf(x):
        return "-"
    return f"{x:,.2f}"


def _hours(x: float) -> str:
    if math.isinf(x):
        return "-"
    return f"{x:.1f}"


def _rate(o) -> str:
    """The offer's interruption rate and where it came from: "0.05/h prior",
    "0.31/h observed (3 in 9.5 node-h)", "2e-04/h catalog"."""
    r = o.preemption_rate
    num = f"{r:.2g}" if r >= 0.01 or r == 0 else f"{r:.0e}"
    text = f"{num}/h {o.rate_source}"
    if o.rate_source == "observed":
        text += f" ({o.rate_events:.3g} in {o.rate_node_hours:.3g} node-h)"
    if o.capacity_failures:
        text += f", {o.capacity_failures:.3g} no-capacity"
    return text


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    right = {"$/h", "exp h", "exp $", "#"}
    out = []
    for r in [header] + rows:
        cells = []
        for i, (c, w) in enumerate(zip(r, widths)):
            last = i == len(r) - 1
            cells.append(str(c) if last else (str(c).rjust(w) if header[i] in right else str(c).ljust(w)))
        out.append("  ".join(cells).rstrip())
    return out


def render_plan(result, show_all: bool = False, limit: int = 20) -> str:
    a = result.assumptions
    lines = [f"plan for {result.spec_name}: {a['nodes']} node(s), {a['work_hours']:g} h of work "
             f"({a['work_source']}), checkpoint {a['checkpoint_cost_hours'] * 60:g} min; "
             f"$/h and $ are for the whole job"]
    header = ["#", "target", "where", "instance", "gpus", "kind", "$/h", "exp h", "exp $", "ckpt every",
              "interruptions", "why"]
    body = []
    for r in result.ranked:
        o = r.offer
        gpus = f"{o.accelerator_count}x{o.accelerator}" if o.accelerator else (str(o.accelerator_count or "-"))
        kind = o.capacity
        body.append([str(r.rank), o.target, o.where, o.instance_type, gpus, kind, _money(r.job_hourly_usd),
                     _hours(r.expected_hours), _money(r.total_usd), format_hours(r.interval_hours, "none", compact=True), _rate(o), r.why])
    if body:
        lines += _table(body, header)
    else:
        lines.append("no offer can run this job")
    excluded = result.excluded
    if excluded:
        shown = excluded if show_all else excluded[:limit]
        lines.append("")
        lines.append(f"excluded ({len(excluded)}):")
        for r in shown:
            o = r.offer
            lines.append(f"  {o.target}: {o.where} {o.instance_type}{' (spot)' if o.spot else ''}: {r.excluded}")
        if len(shown) < len(excluded):
            lines.append(f"  ... {len(excluded) - len(shown)} more (--all lists them)")
    if result.notes:
        lines.append("")
        lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)
