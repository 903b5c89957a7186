"""``launcher cancel JOB``: cancel what the scheduler has for a job, and say what that was."""

from __future__ import annotations

import click

from launcher import api
from launcher.api import errors
from launcher.api.errors import EXIT_FAILED
from launcher.commands.common import launcher_of, to_stderr


@click.command()
@click.argument("job")
@click.option("--element", type=int, help="JOB is a sweep: cancel only this element.")
@click.pass_context
def cancel(ctx, job, element):
    """Cancel what the scheduler has for a job (or a sweep, or one element of it), and say
    what that was (idempotent)."""
    try:
        r = launcher_of(ctx).cancel(job, element)  # a sweep id or an element: the sweep's cancel
    except errors.CancelFailed as e:  # its module (recovery's) loads on first use, not at --help
        _print(e.report)
        raise
    if isinstance(r, api.SweepCancelled):
        for one in r.reports:
            _print(one)
        if element is None:
            click.echo(r.summary_line())
        if not r.ok:
            ctx.exit(EXIT_FAILED)
        return
    _print(r)


def _print(r) -> None:
    if r.finished is not None and r.finished_state == "CANCELLED":
        click.echo(f"{r.job_id}: was already cancelled: {r.finished}; nothing to do")
        return
    if r.finished is not None:
        click.echo(f"{r.job_id}: had already finished: {r.finished}; nothing to cancel")
        return
    for label in r.cancelled:
        click.echo(f"{r.job_id}: cancelled {label}")
    for label in r.still_active:
        to_stderr(f"{r.job_id}: warning: cancel sent, but the scheduler still reports {label}")
    if r.note:
        click.echo(f"{r.job_id}: {r.note}")
    if not r.ok:
        for e in r.errors:
            to_stderr(f"{r.job_id}: cancel failed: {e}")
        return
    click.echo(f"{r.job_id}: closed as CANCELLED; `launcher watch` will not resume it")


def register(group) -> None:
    group.add_command(cancel)
