"""``launcher plan FILE``: the spec's offers ranked by expected total cost.

Imports stay light: click here; the planner (stdlib + pydantic) inside the command;
boto3 only with ``--live-spot-prices``. SkyPilot and paramiko are never imported.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click


def _duration_hours(value, name):
    if value is None:
        return None
    from ..units import parse_duration

    try:
        return parse_duration(value) / 3600.0
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint=name) from None


def _money(x: float) -> str:
    if math.isinf(x):
        return "-"
    return f"{x:,.2f}"


def _hours(x: float) -> str:
    if math.isinf(x):
        return "-"
    return f"{x:.1f}"


def _interval(x: float) -> str:
    if math.isinf(x):
        return "none"
    if x < 1:
        return f"{x * 60:.0f}m"
    return f"{x:.1f}h"


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
                     _hours(r.expected_hours), _money(r.total_usd), _interval(r.interval_hours), _rate(o), r.why])
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


@click.command("plan")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (the same rows).")
@click.option("--target", "-t", "targets", multiple=True,
              help="Rank only these targets (default: the spec's targets, else every configured one).")
@click.option("--live-spot-prices", is_flag=True,
              help="Ask AWS for current spot prices (boto3, its usual credentials and endpoint settings).")
@click.option("--work", help="Hours of work the job needs, e.g. 36h (default: resources.expected_runtime, "
                             "else resources.time_limit).")
@click.option("--checkpoint-cost", default=None, help="Time to write one checkpoint (default: checkpoint.cost, "
                                                      "else 5m).")
@click.option("--all", "show_all", is_flag=True, help="List every excluded offer.")
@click.option("--no-queue", is_flag=True, help="Do not ask Slurm targets for their queue wait.")
def plan_command(file, as_json, targets, live_spot_prices, work, checkpoint_cost, show_all, no_queue):
    """Rank the spec's offers by expected total cost, counting preemptions and lost work."""
    from ..app import App
    from ..launch import queue_waits
    from ..plan import params_for, plan
    from ..spec import load_spec

    spec = load_spec(file)
    app = App()
    config = app.config
    params = params_for(spec, work_hours=_duration_hours(work, "--work"),
                        checkpoint_cost_hours=_duration_hours(checkpoint_cost, "--checkpoint-cost"))
    names = list(targets or spec.targets or config.file.targets)
    configured = [n for n in names if n in config.file.targets]  # queue_waits asks the ones with a queue
    notes = []
    waits = {} if no_queue else queue_waits(app, spec, configured, notes.append)
    # rates learned from the attempts `launcher watch` has seen (none yet: no state store to read)
    store = app.store if (app.home / "state.db").exists() else None
    result = plan(spec, config, params, targets=targets or None, live_spot=live_spot_prices, queue_waits=waits,
                  store=store)
    result = result.with_notes(notes) if notes else result
    app.close()
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        click.echo(render_plan(result, show_all=show_all))
    if result.best is None:
        raise SystemExit(1)


def register(group) -> None:
    group.add_command(plan_command)
