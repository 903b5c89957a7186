"""``launcher targets``: configured targets and their probed facts (``targets trust`` is in ssh.py)."""

from __future__ import annotations

import json

import click

from launcher.commands.common import launcher_of


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--no-probe", is_flag=True, help="List the configured targets without contacting them.")
@click.pass_context
def targets(ctx, as_json, no_probe):
    """Configured targets and their probed facts."""
    if ctx.invoked_subcommand is not None:
        return
    lx = launcher_of(ctx)
    rows = [t.to_dict() for t in lx.targets(probe=not no_probe)]
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    config = lx.config_info()
    click.echo(f"config: {config.path}" + ("" if config.exists else " (not present: built-in targets only)"))
    for r in rows:
        click.echo(f"{r['name']}  [{r.get('backend', '?')}]")
        if "error" in r:
            click.echo(f"    error: {r['error']}")
        for k, v in (r.get("facts") or {}).items():
            if isinstance(v, (list, dict)):
                v = json.dumps(v, default=str)
                if len(v) > 120:
                    v = v[:117] + "..."
            click.echo(f"    {k}: {v}")


def register(group) -> None:
    group.add_command(targets)
