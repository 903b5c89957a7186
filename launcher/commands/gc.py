"""``launcher gc``: remove ended jobs older than a cutoff, with their rows and local folders
(the work is ``Launcher.gc_jobs``, ``launcher.state.history``). Checkpoint roots are
``launcher checkpoints --gc``'s."""

from __future__ import annotations

import json
import time

import click

from launcher.commands.common import launcher_of


@click.command("gc")
@click.option("--older-than", default="30d", show_default=True, metavar="DURATION",
              help="Remove jobs that ended (their row last changed) longer ago than this: 30d, 12h, 90m.")
@click.option("--dry-run", is_flag=True, help="Name what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def gc(ctx, older_than, dry_run, as_json):
    """Remove ended jobs older than --older-than: their rows in the state store (attempts,
    events, claims, notifications, provenance), their local job folders and the folders of
    their function calls under $LAUNCHER_HOME/calls (Launcher.submit). Never an open
    job, a sweep that is not over, a job whose notifications are not settled, another
    person's job on a team's store (unless run as the watchers' role), nor a checkpoint root
    (that is `launcher checkpoints ROOT --gc`)."""
    done = launcher_of(ctx).gc_jobs(older_than, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps(done.to_json(), indent=2))
        return
    verb = "would remove" if dry_run else "removed"
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(done.cutoff))
    for r in done.removed:
        folders = f"; folder {', '.join(r['folders'])}" if r["folders"] else ""
        click.echo(f"{r['job_id']}: {verb} ({r['state'].lower()}{folders})")
    for k in done.kept:
        click.echo(f"{k['job_id']}: kept: {k['why']}")
    for c in done.calls:
        whose = f" (of {', '.join(c['jobs'])})" if c["jobs"] else " (no job names it)"
        click.echo(f"call folder {c['path']}{whose}: {verb}")
    for x in done.left:
        click.echo(f"{x['job_id']}: folder {x['path']} left: {x['why']}")
    sweeps = f" and {len(done.sweeps)} sweep(s)" if done.sweeps else ""
    click.echo(f"{verb} {len(done.removed)} job(s){sweeps} that ended before {when}; kept {len(done.kept)}"
               + (" (dry run: nothing removed)" if dry_run else ""))


def register(group) -> None:
    group.add_command(gc)
