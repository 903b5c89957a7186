"""``launcher validate FILE``: check a spec and the targets it names."""

from __future__ import annotations

from pathlib import Path

import click

from launcher.commands.common import launcher_of


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
def validate(ctx, file):
    """Check a job spec; print 'ok' or every error with its field path."""
    launcher_of(ctx, kind="SpecReader").validate(file)  # warns about secret-looking env itself
    click.echo("ok")


def register(group) -> None:
    group.add_command(validate)
