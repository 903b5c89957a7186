"""``launcher lineage CHECKPOINT`` and ``launcher diff RUN_A RUN_B``: run provenance."""

from __future__ import annotations

import json
import os

import click

from ..errors import LauncherError


@click.command("lineage")
@click.argument("checkpoint")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (the full run record too).")
@click.option("--spec", "show_spec", is_flag=True, help="Print the spec the run was launched with, as given.")
def lineage(checkpoint, as_json, show_spec):
    """Which run, config and code produced CHECKPOINT (a ROOT/step-<N>.g<G> directory or
    s3:// URL; a checkpoint ROOT means its latest committed checkpoint).

    Read from the checkpoint root only (COMMIT.json's run, ROOT/.launcher/runs/<run>/RUN.json,
    the attempt records, GENERATIONS.json), so it works after the job finished and on
    another machine; the local state store is only a fallback for a missing RUN.json."""
    from ..provenance.lineage import format_lineage
    from ..provenance.lineage import lineage as do_lineage

    d = do_lineage(checkpoint)
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


def load_run(ref: str) -> dict:
    """A run's record from: a RUN.json file, a checkpoint (directory, root or s3:// URL), or a
    job id (or unique prefix) in the state store."""
    from ..checkpoint.store import is_s3

    if os.path.isfile(ref):
        try:
            with open(ref, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise LauncherError(f"{ref}: not a RUN.json record: {e}") from None
        if not isinstance(doc, dict) or "run" not in doc:
            raise LauncherError(f"{ref}: not a RUN.json record")
        return doc
    if is_s3(ref) or os.path.isdir(ref):
        from ..provenance.lineage import lineage as do_lineage

        d = do_lineage(ref)
        if not d.get("run"):
            raise LauncherError(f"{ref}: no run record found (run {d.get('run_id') or 'unknown'})")
        return d["run"]
    from ..app import App
    from ..provenance.record import load_record

    app = App()
    try:
        row = app.store.get_job(ref)
        doc = load_record(app.store, row.job_id)
    finally:
        app.close()
    if doc is None:
        raise LauncherError(f"job {row.job_id} has no provenance record (launched before provenance was recorded)")
    doc.pop("_location", None)
    return doc


@click.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def diff(run_a, run_b, as_json):
    """What differs between two runs' provenance: config keys, code, packages, versions.

    RUN_A and RUN_B are job ids (or unique prefixes) in the state store, RUN.json files,
    or checkpoints (directory, root or s3:// URL: the run that wrote it)."""
    from ..provenance.diff import diff_runs, format_diff

    d = diff_runs(load_run(run_a), load_run(run_b))
    if as_json:
        click.echo(json.dumps(d, indent=2, default=str))
        return
    click.echo(format_diff(d), nl=False)


def register(group) -> None:
    group.add_command(lineage)
    group.add_command(diff)
