"""``launcher render FILE``: print exactly what would be submitted."""

from __future__ import annotations

from pathlib import Path

import click

from launcher.commands.common import launcher_of


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", "-t", help="Target name from the config (default: the spec's first, else 'local').")
@click.option("--fresh", is_flag=True, help="Render as `launch --fresh` would submit it.")
@click.option("--facts", "facts_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Render with the target's facts from this file (`launcher targets --json` output or a captured "
                   "probe) instead of probing it: for a cluster this machine cannot reach. Needs --target.")
@click.pass_context
def render(ctx, file, target, fresh, facts_file):
    """Print exactly what would be submitted (sbatch script, task YAML).

    On stderr: what a launch now would resume (run and step) and the LAUNCHER_SEED the
    script carries."""
    lx = launcher_of(ctx, kind="SpecLauncher")
    r = lx.render(file, target=target, fresh=fresh, facts_file=facts_file)  # its notes go to stderr
    click.echo(r.text, nl=not r.text.endswith("\n"))


def register(group) -> None:
    group.add_command(render)
