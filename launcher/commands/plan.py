"""``launcher plan FILE``: the spec's offers ranked by expected total cost.

Imports stay light: click here; the planner (stdlib + pydantic) inside the command;
boto3 only with ``--live-spot-prices``. SkyPilot and paramiko are never imported.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from launcher.commands.common import launcher_of
from launcher.spec.units import parse_duration


MAX_HOURS = 10 * 365 * 24  # ten years: more is a typo, and would rank nonsense


def _duration_hours(value, name):
    """VALUE (a duration with a unit) in hours; BadParameter names the option when it is not a
    positive duration of at most ten years."""
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except (ValueError, OverflowError) as e:
        raise click.BadParameter(str(e), param_hint=name) from None
    if not seconds > 0:
        raise click.BadParameter(f"expected a positive duration like 90m or 36h, got {value!r}", param_hint=name)
    if seconds / 3600.0 > MAX_HOURS:
        raise click.BadParameter(f"expected at most {MAX_HOURS}h (ten years), got {value!r}", param_hint=name)
    return seconds / 3600.0


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
@click.pass_context
def plan_command(ctx, file, as_json, targets, live_spot_prices, work, checkpoint_cost, show_all, no_queue):
    """Rank the spec's offers by expected total cost, counting preemptions and lost work."""
    from launcher.plan.text import render_plan  # the verb's own module: loaded when it runs, not at --help

    result = launcher_of(ctx).plan(file, targets=targets, work=_duration_hours(work, "--work"),
                                   checkpoint_cost=_duration_hours(checkpoint_cost, "--checkpoint-cost"),
                                   live_spot_prices=live_spot_prices, queue=not no_queue)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        click.echo(render_plan(result, show_all=show_all))
    if result.best is None:
        ctx.exit(1)


def register(group) -> None:
    group.add_command(plan_command)
