"""What every verb shares: the one ``Launcher`` of an invocation (closed when the command
ends), stderr notes, and printing a log stream that Ctrl-C stops without stopping the job."""

from __future__ import annotations

import click

FRESH_HELP = ("Start the run over from step 0. Nothing is deleted: the checkpoints already under the spec's "
              "checkpoint root stay on disk, stale (superseded by this run), never resumed from.")


def to_stderr(line: str) -> None:
    click.echo(line, err=True)


def launcher_of(ctx, note=to_stderr, specs_only: bool = False):
    """The invocation's ``launcher.api.facade.Launcher`` (created on first use, closed with ``ctx``).
    SPECS_ONLY (``validate``, ``render``): a ``launcher.api.specs.SpecLauncher`` instead, which
    imports what reading and rendering a spec need and not the modules of jobs, sweeps and reports."""
    from launcher import api  # each name of the package is imported on first use (PEP 562): not at --help

    if ctx.obj is None:
        ctx.obj = (api.SpecLauncher if specs_only else api.Launcher)(note=note)
        ctx.call_on_close(ctx.obj.close)
    return ctx.obj


def stream(chunks, job_id) -> bool:
    """Print a log stream; False when Ctrl-C stopped it. Ctrl-C stops only the following: the
    job keeps running (it is in its own session on this machine, or on a scheduler)."""
    try:
        for chunk in chunks:
            click.echo(chunk, nl=False)
    except KeyboardInterrupt:
        click.echo(f"\n{job_id} was not stopped: Ctrl-C ends only the following. "
                   f"`launcher logs -f {job_id}` follows it again, `launcher cancel {job_id}` stops it.", err=True)
        return False
    return True
