"""`launcher watch`: keep every open job running (recovery), safe to stop and restart."""

from __future__ import annotations

import click

from launcher.commands.common import launcher_of


def _finite(ctx, param, value):
    """click's FloatRange lets nan through (nan compares false with both bounds)."""
    if value is not None and value != value:
        raise click.BadParameter("expected a number of seconds, got nan")
    return value


@click.command()
@click.option("--interval", default=10.0, show_default=True, type=click.FloatRange(0.05, 86400), callback=_finite,
              help="Seconds between status cycles.")
@click.option("--once", is_flag=True, help="Run one cycle and exit (for cron or CI).")
@click.pass_context
def watch(ctx, interval, once):
    """Recover every open job: one batched status call per target per cycle; every
    decision is recorded with its reason (see `launcher status JOB`)."""
    lx = launcher_of(ctx)  # closed when the command ends
    try:
        lx.keep_watching(interval=interval, once=once, echo=click.echo)
    except KeyboardInterrupt:
        click.echo("watch stopped; start it again at any time", err=True)


def register(group) -> None:
    group.add_command(watch)
