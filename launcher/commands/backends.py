"""``launcher backends``: installed backends, and why any cannot load."""

from __future__ import annotations

import json

import click

from launcher.commands.common import launcher_of


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def backends(ctx, as_json):
    """Installed backends, and why any of them cannot load."""
    rows = [b.to_json() for b in launcher_of(ctx).backends()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        line = f"{r['name']:<10} {r['status']:<12} {r['source']:<10} {r['entry_point']}"
        click.echo(line)
        if r["error"]:
            click.echo(f"           {r['error']}")
        for s in r["shadowed"]:
            click.echo(f"           ignored {s}: a built-in backend has this name")


def register(group) -> None:
    group.add_command(backends)
