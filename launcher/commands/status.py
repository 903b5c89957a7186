"""``launcher status [JOB]``: jobs, or one job with every attempt and decision."""

from __future__ import annotations

import json

import click

from launcher import api

from launcher.commands.common import launcher_of, to_stderr


@click.command()
@click.argument("job", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--all", "show_all", is_flag=True, help="Include finished jobs (default: the 50 most recent).")
@click.pass_context
def status(ctx, job, as_json, show_all):
    """Show jobs (or one job with every attempt, its reason and last committed step)."""
    lx = launcher_of(ctx)  # reconcile and refresh notes go to stderr
    _status(lx, job, as_json, show_all)
    warning = lx.watcher_warning()  # jobs open and no watcher running: one line on stderr, never on stdout
    if warning:
        to_stderr(warning)


def _status(lx, job, as_json, show_all) -> None:
    from launcher.api import status_view as view  # the verb's own module: loaded when it runs, not at --help

    if job:
        d = lx.status(job)  # a sweep id: the sweep's counts by state and element table
        if isinstance(d, api.SweepStatus):
            from launcher.sweep.summary import format_text  # a sweep's table: loaded for a sweep only

            click.echo(json.dumps(d.to_json(), indent=2) if as_json else format_text(d.to_json()).rstrip("\n"))
            return
        click.echo(json.dumps(d.to_json(), indent=2, default=str) if as_json else "\n".join(view.job_lines(d)))
        return
    rows = lx.jobs(all=show_all)
    whose = view.whose(lx.app, rows)  # whose each job is, and which are shown as stored
    click.echo(view.jobs_json(rows, whose) if as_json else "\n".join(view.jobs_lines(rows, whose)))


def register(group) -> None:
    group.add_command(status)
