"""``launcher lineage CHECKPOINT`` and ``launcher diff RUN_A RUN_B``: run provenance."""

from __future__ import annotations

import json

import click

from launcher.api.errors import LauncherError
from launcher.commands.common import launcher_of


@click.command("lineage")
@click.argument("checkpoint")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (the full run record too).")
@click.option("--spec", "show_spec", is_flag=True, help="Print the spec the run was launched with, as given.")
@click.pass_context
def lineage(ctx, checkpoint, as_json, show_spec):
    """Which run, config and code produced CHECKPOINT (a ROOT/step-<N>.g<G> directory or
    s3:// URL; a checkpoint ROOT means its latest committed checkpoint).

    Read from the checkpoint root only (COMMIT.json's run, ROOT/.launcher/runs/<run>/RUN.json,
    the attempt records, GENERATIONS.json), so it works after the job finished and on
    another machine; the local state store is only a fallback for a missing RUN.json."""
    from launcher.provenance.lineage import format_lineage  # the verb's own module: loaded when it runs, not at --help

    d = launcher_of(ctx).lineage(checkpoint).to_json()
    if show_spec:
        r = d.get("run") or {}
        text = (r.get("spec") or {}).get("text")
        if text is None:
            raise LauncherError(f"no spec recorded for {checkpoint} (run {d.get('run_id') or 'unknown'})")
        click.echo(text, nl=not text.endswith("\n"))
        return
    if as_json:
        click.echo(json.dumps(d, indent=2, default=str))
        return
    click.echo(format_lineage(d), nl=False)


@click.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def diff(ctx, run_a, run_b, as_json):
    """What differs between two runs' provenance: config keys, code, packages, versions.

    RUN_A and RUN_B are job ids (or unique prefixes) in the state store, RUN.json files,
    or checkpoints (directory, root or s3:// URL: the run that wrote it)."""
    from launcher.provenance.diff import format_diff  # the verb's own module: loaded when it runs, not at --help

    d = launcher_of(ctx).diff(run_a, run_b).to_json()
    if as_json:
        click.echo(json.dumps(d, indent=2, default=str))
        return
    click.echo(format_diff(d), nl=False)


def register(group) -> None:
    group.add_command(lineage)
    group.add_command(diff)
