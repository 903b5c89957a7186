"""``launcher nodes``: the nodes quarantined for the whole store, and ``nodes release`` (docs/bad-nodes.md)."""

from __future__ import annotations

import json
import time

import click

from launcher.commands.common import launcher_of


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON list: target, node, since, until, blames, reason.")
@click.option("--target", default=None, help="Only the nodes quarantined on this target.")
@click.pass_context
def nodes(ctx, as_json, target):
    """Nodes quarantined after failing jobs: why, and until when."""
    if ctx.invoked_subcommand is not None:
        return
    rows = launcher_of(ctx).nodes(target)
    if as_json:
        click.echo(json.dumps([{**q.to_dict(), "until": q.expires} for q in rows], indent=2))
        return
    if not rows:
        click.echo("no node is quarantined" + (f" on target {target}" if target else ""))
        return
    now = time.time()
    for q in rows:
        until = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(q.expires))
        click.echo(f"{q.target}  {q.node}  until {until} ({(q.expires - now) / 3600:.1f} h left)  {q.reason}")


@nodes.command("release")
@click.argument("node")
@click.option("--target", default=None, help="Release it on this target only (default: on every target).")
@click.pass_context
def release(ctx, node, target):
    """Lift NODE's quarantine (and forget its blames): jobs may run on it again."""
    released = launcher_of(ctx).release_node(node, target)
    click.echo(f"released {node} on {', '.join(released)}")


def register(group) -> None:
    group.add_command(nodes)
