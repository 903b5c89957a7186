"""``launcher status [JOB]``: jobs, or one job with every attempt and decision."""

from __future__ import annotations

import click

from launcher.commands.common import launcher_of


@click.command()
@click.argument("job", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--all", "show_all", is_flag=True, help="Include finished jobs (default: the 50 most recent).")
@click.pass_context
def status(ctx, job, as_json, show_all):
    """Show jobs (or one job with every attempt, its reason and last committed step)."""
    from launcher.api import status_view as view

    lx = launcher_of(ctx)  # reconcile and refresh notes go to stderr
    if job:
        sweep = lx.sweep(job)  # a sweep id: counts by state and the element table
        if sweep is not None:
            import json

            from launcher.sweep.summary import format_text

            click.echo(json.dumps(sweep, indent=2) if as_json else format_text(sweep).rstrip("\n"))
            return
        d = lx.status(job)
        click.echo(view.job_json(d) if as_json else "\n".join(view.job_lines(d)))
        return
    rows = lx.jobs(all=show_all)
    click.echo(view.jobs_json(rows) if as_json else "\n".join(view.jobs_lines(rows)))


def register(group) -> None:
    group.add_command(status)
