"""What every verb shares: the one ``Launcher`` of an invocation (closed when the command
ends), stderr notes, and printing a log stream that Ctrl-C stops without stopping the job."""

from __future__ import annotations

import click

FRESH_HELP = ("Start the run over from step 0. Nothing is deleted: the checkpoints already under the spec's "
              "checkpoint root stay on disk, stale (superseded by this run), never resumed from.")


def to_stderr(line: str) -> None:
    click.echo(line, err=True)


def launcher_of(ctx, note=to_stderr, kind: str = "Launcher"):
    """The invocation's launcher (created on first use, closed with ``ctx``): KIND names its class in
    ``launcher.api``: "Launcher" (the facade, every verb), "SpecLauncher" (``load``, ``validate`` and
    ``render``: for ``launcher render``) or "SpecReader" (``load`` and ``validate``: for ``launcher
    validate``). The two parts import only what their verbs need, not the modules of jobs and sweeps."""
    from launcher import api  # each name of the package is imported on first use (PEP 562): not at --help

    if ctx.obj is None:
        ctx.obj = getattr(api, kind)(note=note)
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
