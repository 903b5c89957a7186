"""``launcher report JOB|SWEEP``: wall time by category, goodput, cost, checkpoint interval;
for a sweep, those summed over its elements, a row per element and the best element."""

from __future__ import annotations

import json

import click

from launcher import api
from launcher.api.errors import WrongKind
from launcher.commands.common import launcher_of

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
                       allocation, startup) and restored its checkpoint

Each interruption is split into its clocks: detection (failure -> noticed),
cleanup and fencing (-> the replacement submitted), reallocation (-> its program
started), restore (-> back at the resume step) and lost work. They add up to the
wall time with the other categories; a clock no record gives is "-" with the
reason (docs/goodput.md). The job is brought up to date first, as `launcher
status` does (--no-refresh: only what is stored).

Goodput is useful compute / wall time. Cost is each attempt's allocation time x
its hourly price (recorded at submit, else the target's gpu_hour_usd x GPUs), or
its recorded cost where no price is known. The checkpoint interval achieved is
compared with the Young/Daly optimum for the observed failure rate.

Sources: the state store, the scheduler's per-run records (Slurm sacct) and the
attempt records under the checkpoint root (ROOT/.launcher/attempts/g<G>.json).
--plot FILE.png draws the timeline (needs matplotlib: the 'plot' extra).

For a SWEEP (the id `launcher launch` printed): the same categories and cost summed
over its elements (element time: their wall times added up), one row per element
(state, attempts, goodput, cost, latest step, metric) and the best element, ranked by
a metric the elements reported with jobside.report(step, NAME=value): --metric NAME
--mode min|max, else the sweep's early_stop metric and mode. --scope last (default)
ranks each element's latest report of it, --scope best its best one.
"""


@click.command("report", help=_HELP,
               short_help="Wall time by category, goodput and cost of JOB (or of a SWEEP, and its best element).")
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write the timeline as a PNG.")
@click.option("--no-refresh", is_flag=True, help="Use only what is stored (do not ask the scheduler).")
@click.option("--metric", help="A sweep: rank its elements by this reported metric.")
@click.option("--mode", type=click.Choice(["min", "max"]), help="A sweep: is a lower or a higher metric better.")
@click.option("--scope", type=click.Choice(["last", "best"]), default="last", show_default=True,
              help="A sweep: rank by each element's latest report of the metric, or its best one.")
@click.pass_context
def report(ctx, job, as_json, plot_path, no_refresh, metric, mode, scope):
    try:  # a sweep id: the sweep's report
        rep = launcher_of(ctx).report(job, refresh=not no_refresh, plot=plot_path, metric=metric, mode=mode,
                                      scope=scope)
    except WrongKind as e:
        if e.sweep:
            raise click.UsageError(f"--plot draws one job's timeline: pass one element, {job}-e<index>") from None
        raise click.UsageError(f"--metric and --mode rank the elements of a sweep; {job} is not a sweep") from None
    if isinstance(rep, api.SweepReport):
        _sweep(rep, as_json)
        return
    d = rep.to_dict()
    if as_json:
        click.echo(json.dumps(d, indent=2, default=str))
        return
    from launcher.report.text import format_report  # the verb's own module: loaded when it runs, not at --help

    click.echo(format_report(d), nl=False)
    if plot_path:
        click.echo(f"timeline written to {plot_path}")


def _sweep(rep, as_json) -> None:
    from launcher.report.sweep_text import format_sweep_report  # the verb's own module: not at --help

    d = rep.to_json()
    if as_json:
        click.echo(json.dumps(d, indent=2, default=str))
        return
    click.echo(format_sweep_report(d), nl=False)


def register(group) -> None:
    group.add_command(report)
