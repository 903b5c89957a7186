"""``launcher report JOB``: wall time by category, goodput, cost, checkpoint interval."""

from __future__ import annotations

import json

import click

from .common import launcher_of

_HELP = """Where JOB's wall time went, from its first submission to the end of its
last attempt (now, if it is still open). The categories add up to the wall time:

\b
  queue wait           waiting for the first allocation
  provisioning         first allocation -> the program's start (job script,
                       setup, checkpoint discovery)
  useful compute       the program running, up to the last checkpoint a later
                       attempt resumed from, minus the saves
  checkpoint overhead  the saves (the job-side helper's timings)
  lost work            at each interruption: from the end of the last committed
                       checkpoint that was used to the failure (a crashed node:
                       one heartbeat interval after its last job-side heartbeat)
  restart overhead     from the failure (so the scheduler's detection delay too)
                       until the next attempt's program started (requeue, queue,
                       allocation, startup)

Goodput is useful compute / wall time. Cost is each attempt's allocation time x
its hourly price (recorded at submit, else the target's gpu_hour_usd x GPUs), or
its recorded cost where no price is known. The checkpoint interval achieved is
compared with the Young/Daly optimum for the observed failure rate.

Sources: the state store, the scheduler's per-run records (Slurm sacct) and the
attempt records under the checkpoint root (ROOT/.launcher/attempts/g<G>.json).
--plot FILE.png draws the timeline (needs matplotlib: the 'plot' extra).
"""


@click.command("report", help=_HELP, short_help="Wall time by category, goodput, cost and checkpoint interval of JOB.")
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write the timeline as a PNG.")
@click.option("--no-refresh", is_flag=True, help="Use only what is stored (do not ask the scheduler).")
@click.pass_context
def report(ctx, job, as_json, plot_path, no_refresh):
    d = launcher_of(ctx).report(job, refresh=not no_refresh, plot=plot_path).to_dict()
    if as_json:
        click.echo(json.dumps(d, indent=2, default=str))
        return
    from ..report.text import format_report

    click.echo(format_report(d), nl=False)
    if plot_path:
        click.echo(f"timeline written to {plot_path}")


def register(group) -> None:
    group.add_command(report)
