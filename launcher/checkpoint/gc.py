"""Garbage collection of launcher checkpoints (``step-<N>.g<G>`` directories only).

- Keeps the KEEP newest committed checkpoints (KEEP >= 1, so the newest committed one is
  never touched) and deletes older committed ones: COMMIT.json first, so a half-finished
  delete leaves a torn directory, never a committed one with missing files.
- Leaves in place the checkpoints of an earlier run that a fresh run (``launch --fresh``)
  superseded: they are stale (never resumed from) but they are not a zombie's.
- Moves torn and stale checkpoints aside under ``ROOT/.quarantine/<name>.<UTC time>/``
  (on S3: copied under that prefix, then the originals deleted); never deletes them.
- Leaves alone: a torn checkpoint of the current (or a newer) generation that is newer
  than the newest committed one (its writer may still be writing it); a checkpoint with a
  malformed COMMIT.json (needs a human); every framework layout (read-only); anything under
  ROOT named like a checkpoint that is not a real directory (a symbolic link, a FIFO): gc
  never follows a link out of ROOT, so it never moves or deletes what a link points at.
"""

from __future__ import annotations

import datetime

from launcher.checkpoint.contract import COMMIT, QUARANTINE, read_generations
from launcher.checkpoint.discovery import COMMITTED, STALE, TORN, scan
from launcher.checkpoint.errors import CheckpointError


def _stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


def plan_gc(entries, keep: int, current_generation: int, gens=None):
    """Pure decision: {"kept", "delete", "quarantine", "skipped"}, lists of (Entry, reason).
    With GENS, checkpoints superseded by a fresh run (an earlier run's) are left in place."""
    if not isinstance(keep, int) or keep < 1:
        raise CheckpointError("keep must be an integer >= 1 (the newest committed checkpoint is never deleted)")
    ours = [e for e in entries if e.format == "launcher"]
    committed = [e for e in ours if e.state == COMMITTED]
    newest = committed[0] if committed else None
    out = {"kept": [], "delete": [], "quarantine": [], "skipped": []}
    for i, e in enumerate(committed):
        if i < keep:
            out["kept"].append((e, "one of the %d newest committed" % keep))
        else:
            out["delete"].append((e, "committed, older than the %d kept" % keep))
    for e in ours:
        if e.foreign:
            out["skipped"].append((e, "left in place: " + e.reason))
        elif e.state == STALE:
            if gens is not None and gens.stale_cause(e.step, e.generation)[0] == "fresh":
                out["skipped"].append((e, "an earlier run's, left in place: " + e.reason))
            else:
                out["quarantine"].append((e, e.reason))
        elif e.state == TORN:
            if e.malformed:
                out["skipped"].append((e, "left in place for a human: " + e.reason))
            elif e.generation >= current_generation and (newest is None or
                                                         (e.step, e.generation) > (newest.step, newest.generation)):
                out["skipped"].append((e, "torn but may still be being written by generation %d" % e.generation))
            else:
                out["quarantine"].append((e, e.reason))
    for e in entries:
        if e.format != "launcher" and e.foreign:
            out["skipped"].append((e, "left in place: " + e.reason))
        elif e.format != "launcher":
            out["skipped"].append((e, "%s layout: read-only" % e.format))
    return out


def gc(store, keep: int, dry_run: bool = False, verify: bool = False) -> dict:
    """Apply plan_gc to ROOT. Returns {"kept": [path], "deleted": [path], "quarantined":
    [{"path", "to", "reason"}], "skipped": [{"path", "reason"}], "dry_run": bool}."""
    gens = read_generations(store)
    entries = scan(store, verify=verify, gens=gens)
    p = plan_gc(entries, keep, gens.generation, gens)
    rep = {"kept": [e.path for e, _ in p["kept"]], "deleted": [], "quarantined": [],
           "skipped": [{"path": e.path, "reason": r} for e, r in p["skipped"]], "dry_run": bool(dry_run)}
    stamp = _stamp()
    for e, why in p["quarantine"]:
        dst = "%s/%s.%s" % (QUARANTINE, e.name, stamp)
        if not dry_run:
            try:
                store.move(e.name, dst)
            except (OSError, CheckpointError) as err:
                rep["skipped"].append({"path": e.path, "reason": "could not quarantine: %s" % err})
                continue
        rep["quarantined"].append({"path": e.path, "to": store.url(dst), "reason": why})
    for e, _why in p["delete"]:
        if not dry_run:
            try:
                store.delete_tree(e.name, first=(COMMIT,))
            except (OSError, CheckpointError) as err:
                rep["skipped"].append({"path": e.path, "reason": "could not delete: %s" % err})
                continue
        rep["deleted"].append(e.path)
    return rep
