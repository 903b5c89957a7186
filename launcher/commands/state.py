"""``launcher state migrate --to postgresql://...``: move a person's SQLite store into a team's
PostgreSQL store (docs/team-store.md). The work is ``Launcher.migrate_state``'s."""

from __future__ import annotations

import json

import click

from launcher.commands.common import launcher_of


@click.group("state")
def state():
    """The state store: where jobs, attempts and events are kept."""


@state.command("migrate")
@click.option("--to", "to", required=True, metavar="URL",
              help="The PostgreSQL store to copy into: postgresql://USER@HOST:PORT/DB.")
@click.option("--from", "source", default=None, metavar="HOME",
              help="The SQLite store to copy: a $LAUNCHER_HOME (or its state.db); default this one's.")
@click.option("--dry-run", is_flag=True, help="Count the rows per table (and those already there); write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def migrate(ctx, to, source, dry_run, as_json):
    """Copy every table of the SQLite store into the PostgreSQL store at URL: jobs, attempts,
    events, claims, provenance, sweeps. Idempotent: rows the server has are left as they are,
    so a second run copies nothing. Then point the launcher at the server
    (LAUNCHER_STATE_URL, or state_url in the config)."""
    result = launcher_of(ctx).migrate_state(to, dry_run=dry_run, source=source)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    verb = "would copy" if dry_run else "copied"
    click.echo(f"{result.source} -> {result.target}{' (dry run: nothing written)' if dry_run else ''}")
    width = max(len(t.table) for t in result.tables)
    for t in result.tables:
        n = t.to_copy if dry_run else t.copied
        click.echo(f"  {t.table:<{width}}  {t.in_source:>7} rows, {t.present:>7} already there, {verb} {n}")
    if not dry_run:
        click.echo(f"{result.copied} rows copied; to use the server: export LAUNCHER_STATE_URL='{result.target}'")


def register(group) -> None:
    group.add_command(state)
