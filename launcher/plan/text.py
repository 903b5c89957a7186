"""``launcher plan``'s table: a ranked PlanResult as text (pure; the rows, the excluded
offers with why, the notes; under ``cost.deadline`` each row's slack, P(meet) and cost spread,
the fallback and the egress pairs priced at a cloud's highest rate)."""

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
    right = {"$/h", "exp h", "exp $", "#", "slack", "P(meet)", "$ p10-p90"}
    out = []
    for r in [header] + rows:
        cells = []
        for i, (c, w) in enumerate(zip(r, widths)):
            last = i == len(r) - 1
            cells.append(str(c) if last else (str(c).rjust(w) if header[i] in right else str(c).ljust(w)))
        out.append("  ".join(cells).rstrip())
    return out


def _outlook_cells(v) -> list[str]:
    if v is None:
        return ["-", "-", "-"]
    lo, hi = _money(v.cost_p10_usd), _money(v.cost_p90_usd)
    spread = lo if lo == hi else f"{lo}-{hi}"   # one figure: 80% of runs cost the same (uninterrupted)
    return [spread, f"{v.slack_h:+.1f}h", _probability(v.p_meet)]


def _probability(p: float) -> str:
    """0.93, 0.999, >0.9999, <0.01, 0: rounded down, never up to a certainty."""
    if p > 0.9999:
        return ">0.9999"
    if p >= 0.99:
        return f"{math.floor(p * 1000) / 1000:.3f}"
    if p > 0 and p < 0.01:
        return "<0.01"
    return f"{math.floor(p * 100) / 100:.2f}"


def _deadline_lines(d: dict, shown: int = 6) -> list[str]:
    """What the plan says of cost.deadline as a whole, under the table."""
    lines = ["", f"deadline: {d['hours_left']:.1f} h left. slack = hours left - (start + queue wait + expected run) "
             f"on that offer; P(meet): on that offer alone; $ p10-p90: the cost's 10th-90th percentiles "
             f"(interruptions as in exp $; docs/deadline.md)"]
    f = d.get("fallback")
    if f:
        lines.append(f"deadline: launcher watch rides spot while the slack lasts and keeps #{f['rank']} "
                     f"{f['target']}: {f['where']} ({f['kind']}, slack {f['slack_hours']:+.1f}h, P(meet) "
                     f"{_probability(f['p_meet'])}) reachable to finish on")
    elif not d.get("this_machine"):
        lines.append("deadline: no guaranteed offer (on-demand, a queue) is ranked: nothing to fall back on")
    for r in d.get("this_machine") or []:
        lines.append(f"deadline: #{r['rank']} {r['target']} is this machine, which has no spot: a launch there runs "
                     f"the job on it as the guaranteed offer, and launcher watch does not move it")
    unknown = d.get("egress_unknown") or []
    if unknown:
        clouds = sorted({u["pair"].split(":")[0] for u in unknown})
        rates = ", ".join(f"{c} ${next(u['usd_per_gb'] for u in unknown if u['pair'].startswith(c + ':')):g}/GB"
                          for c in clouds)
        names = ", ".join(u["pair"] for u in unknown[:shown])
        more = f" and {len(unknown) - shown} more (--json lists them)" if len(unknown) > shown else ""
        lines.append(f"deadline: egress price unknown for {len(unknown)} region pair(s), priced at the cloud's "
                     f"highest rate ({rates}): {names}{more}")
    return lines


def render_plan(result, show_all: bool = False, limit: int = 20) -> str:
    a = result.assumptions
    lines = [f"plan for {result.spec_name}: {a['nodes']} node(s), {a['work_hours']:g} h of work "
             f"({a['work_source']}), checkpoint {a['checkpoint_cost_hours'] * 60:g} min; "
             f"$/h and $ are for the whole job"]
    deadline = result.deadline
    header = ["#", "target", "where", "instance", "gpus", "kind", "$/h", "exp h", "exp $"]
    if deadline is not None:
        header += ["$ p10-p90", "slack", "P(meet)"]
    header += ["ckpt every", "interruptions", "why"]
    body = []
    for r in result.ranked:
        o = r.offer
        gpus = f"{o.accelerator_count}x{o.accelerator}" if o.accelerator else (str(o.accelerator_count or "-"))
        kind = o.capacity
        row = [str(r.rank), o.target, o.where, o.instance_type, gpus, kind, _money(r.job_hourly_usd),
               _hours(r.expected_hours), _money(r.total_usd)]
        if deadline is not None:
            row += _outlook_cells(r.outlook)
        body.append(row + [format_hours(r.interval_hours, "none", compact=True), _rate(o), r.why])
    if body:
        lines += _table(body, header)
    else:
        lines.append("no offer can run this job")
    if deadline is not None:
        lines += _deadline_lines(deadline)
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
