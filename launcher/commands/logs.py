"""``launcher logs JOB [-f]``: a job's output."""

from __future__ import annotations

import click

from launcher.api.errors import EXIT_INTERRUPTED
from launcher.commands.common import launcher_of, stream


@click.command()
@click.argument("job")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new output until the job ends.")
@click.option("--element", type=int, help="JOB is a sweep: print this element's output.")
@click.pass_context
def logs(ctx, job, follow, element):
    """Print a job's output (or one element's of a sweep)."""
    chunks = launcher_of(ctx).logs(job, follow=follow, element=element)
    if not stream(chunks, chunks.job_id):
        ctx.exit(EXIT_INTERRUPTED)


def register(group) -> None:
    group.add_command(logs)
