"""``launcher checkpoints ROOT``: list checkpoints with their state, and garbage-collect."""

from __future__ import annotations

import json

import click

from launcher.commands.common import launcher_of

_HELP = """List every checkpoint under ROOT (a directory or s3://bucket/prefix), newest
first, with its state and the reason:

\b
  committed  COMMIT.json present and every listed file has its listed size
             (or a framework's commit marker: torch DCP .metadata, Orbax
             commit_success.txt, Megatron latest_checkpointed_iteration.txt,
             DeepSpeed latest)
  torn       never committed, a listed file missing or resized, a malformed
             COMMIT.json, or sha256 mismatch (with --verify)
  stale      written by a superseded generation after the job restarted from
             an earlier step (a zombie's fork), or an earlier run's checkpoint
             superseded by a fresh run (launch --fresh): never resumed from

The first committed line (marked *) is where a restart resumes. --json prints a
list of {"path", "step", "generation", "state", "reason"} in the same order
(generation is null for framework layouts).

With --gc: keep the --keep newest committed launcher checkpoints (the newest is
never deleted), delete older committed ones (COMMIT.json first), and move torn
and stale ones to ROOT/.quarantine/ (never deleted). A torn checkpoint that may
still be being written (current generation, newer than the newest commit), one
with a malformed COMMIT.json, an earlier run's checkpoints superseded by a fresh
run, and framework layouts are left in place.
--dry-run shows what would happen.

Nothing under ROOT is trusted: a symbolic link (a step directory, a file a
COMMIT.json lists, .quarantine) is never followed, so it is never a committed
checkpoint and gc never moves or deletes what it points at; a FIFO or device
named COMMIT.json (or GENERATIONS.json, or a framework marker) is reported, never
opened in a way that blocks; manifests above 16 MiB are refused.
"""


@click.command("checkpoints", help=_HELP)
@click.argument("root")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--verify", is_flag=True, help="Also check sha256 of every file where COMMIT.json records one.")
@click.option("--gc", "do_gc", is_flag=True, help="Garbage-collect (see above).")
@click.option("--keep", type=click.IntRange(min=1), default=3, show_default=True,
              help="With --gc: committed checkpoints to keep.")
@click.option("--dry-run", is_flag=True, help="With --gc: print the plan, change nothing.")
@click.option("--tiers", "tiers", is_flag=True,
              help="Multi-tier checkpoints (checkpoint.local): each step's state per tier, from the nodes' "
                   "holdings records: the ranks with a local copy, with a peer copy, and the root's state.")
@click.pass_context
def checkpoints(ctx, root, as_json, verify, do_gc, keep, dry_run, tiers):
    lx = launcher_of(ctx)
    if tiers:
        _print_tiers(lx.checkpoint_tiers(root), root, as_json)
        return
    if do_gc:
        _print_gc(lx.gc(root, keep, dry_run=dry_run, verify=verify).to_json(), as_json)
        return
    listing = lx.checkpoints(root, verify=verify)
    entries = listing.entries
    for e in entries:
        if e.malformed:
            click.echo("warning: %s" % e.reason, err=True)
    if as_json:
        click.echo(json.dumps([e.to_dict() for e in entries], indent=2))
        return
    click.echo("%s  (generation %d)" % (listing.root, listing.generation))
    if not entries:
        click.echo("no checkpoints")
        return
    chosen = listing.latest
    w = max(len(e.name) for e in entries)
    click.echo("  %-9s  %10s  %4s  %-*s  %s" % ("state", "step", "gen", w, "name", "reason"))
    for e in entries:
        click.echo("%s %-9s  %10d  %4s  %-*s  %s" % ("*" if e is chosen else " ", e.state, e.step,
                                                     "-" if e.generation is None else e.generation, w, e.name,
                                                     e.reason))


def _print_tiers(table, root, as_json):
    if as_json:
        click.echo(json.dumps(table, indent=2))
        return
    if not table:
        click.echo("no holdings records under %s (no multi-tier checkpoints)" % root)
        return
    w = max(len(n) for n in table)
    click.echo("%-*s  %5s  %-16s  %-16s  %s" % (w, "name", "ranks", "local", "peer", "durable"))
    for name, r in table.items():
        hosts = r.get("hosts") or {}
        click.echo("%-*s  %5s  %-16s  %-16s  %s" % (w, name, r["world"] or "?", _ranks(r["local"], hosts.get("local")),
                                                   _ranks(r["peer"], hosts.get("peer")), r["durable"] or "-"))


def _ranks(rs, hosts=None):
    """'0,1', or with the hosts holding them (nodes with their own disks) '0@node1,1@node2'."""
    hosts = hosts or {}
    return ",".join("%d@%s" % (r, hosts[str(r)]) if str(r) in hosts else str(r) for r in rs) if rs else "-"


def _print_gc(rep, as_json):
    if as_json:
        click.echo(json.dumps(rep, indent=2))
        return
    would = "would " if rep["dry_run"] else ""
    for p in rep["deleted"]:
        click.echo("%sdelete      %s" % (would, p))
    for q in rep["quarantined"]:
        click.echo("%squarantine  %s -> %s  (%s)" % (would, q["path"], q["to"], q["reason"]))
    for s in rep["skipped"]:
        click.echo("leave       %s  (%s)" % (s["path"], s["reason"]))
    click.echo("kept %d committed: %s" % (len(rep["kept"]), ", ".join(p.rsplit("/", 1)[-1] for p in rep["kept"])
                                          or "-"))


def register(group) -> None:
    group.add_command(checkpoints)
