"""Garbage collection of launcher checkpoints (``step-<N>.g<G>`` directories only).

- Keeps the KEEP newest committed checkpoints (KEEP >= 1, so the newest committed one is
  never touched) and deletes older committed ones: COMMIT.json first, so a half-finished
  delete leaves a torn directory, never a committed one with missing files.
- Leaves in place the checkpoints of an earlier run that a fresh run (``launch --fresh``)
  superseded: they are stale (never resumed from) but they are not a zombie's.
- Moves torn and stale checkpoints aside under ``ROOT/.quarantine/<name>.<UTC time>/``
  (on S3: copied under that prefix, then the originals deleted); never deletes them.
- Keeps, past KEEP, the checkpoint a torchft replica group restarted alone was told to resume
  from (the newest ``rejoins`` entry of each group in the current generation's record): the other
  groups go on saving while it starts, and would otherwise delete it under it.
- Leaves alone: a torn checkpoint of the current (or a newer) generation that is newer
  than the newest committed one (its writer may still be writing it); a checkpoint with a
  malformed COMMIT.json (needs a human); every framework layout (read-only); anything under
  ROOT named like a checkpoint that is not a real directory (a symbolic link, a FIFO): gc
  never follows a link out of ROOT, so it never moves or deletes what a link points at.
"""

from __future__ import annotations

import datetime
from typing import Optional

from launcher.checkpoint.contract import COMMIT, QUARANTINE, read_generations
from launcher.checkpoint.discovery import COMMITTED, STALE, TORN, scan
from launcher.checkpoint.errors import CheckpointError


def _stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


def _writing(e, newest, current_generation: int) -> bool:
    """Whether the torn checkpoint E may still be being written: of the current (or a newer)
    generation, and newer than NEWEST, the newest committed one (None: there is none)."""
    return e.generation >= current_generation and (newest is None or
                                                   (e.step, e.generation) > (newest.step, newest.generation))


def _fate(e, newest, current_generation: int, gens) -> Optional[tuple[str, str]]:
    """(what gc does with the launcher checkpoint E: "skipped" or "quarantine", why), or None
    for a committed one (kept or deleted by its rank among the committed)."""
    if e.foreign:
        return "skipped", "left in place: " + e.reason
    if e.state == STALE:
        if gens is not None and gens.stale_cause(e.step, e.generation)[0] == "fresh":
            return "skipped", "an earlier run's, left in place: " + e.reason
        return "quarantine", e.reason
    if e.state == TORN:
        if e.malformed:
            return "skipped", "left in place for a human: " + e.reason
        if _writing(e, newest, current_generation):
            return "skipped", "torn but may still be being written by generation %d" % e.generation
        return "quarantine", e.reason
    return None


def rejoin_pins(gens) -> set:
    """Steps the current generation's replica groups restarted alone resume from (recovery.in_job
    torchft: ``in-job-restart --rejoin-group`` gives a group the newest commit): each group's newest."""
    rec = gens.record(gens.generation) if gens is not None else None
    newest = {}
    for r in (rec or {}).get("rejoins") or []:
        step = r.get("committed_step") if isinstance(r, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            newest[r.get("group")] = step
    return set(newest.values())


def plan_gc(entries, keep: int, current_generation: int, gens=None):
    """Pure decision: {"kept", "delete", "quarantine", "skipped"}, lists of (Entry, reason).
    With GENS, checkpoints superseded by a fresh run (an earlier run's) are left in place."""
    if not isinstance(keep, int) or keep < 1:
        raise CheckpointError("keep must be an integer >= 1 (the newest committed checkpoint is never deleted)")
    ours = [e for e in entries if e.format == "launcher"]
    committed = [e for e in ours if e.state == COMMITTED]
    newest = committed[0] if committed else None
    out = {"kept": [], "delete": [], "quarantine": [], "skipped": []}
    out["kept"] = [(e, "one of the %d newest committed" % keep) for e in committed[:keep]]
    pins = rejoin_pins(gens)
    out["kept"] += [(e, "the resume point of a replica group restarted alone") for e in committed[keep:]
                    if e.step in pins]
    out["delete"] = [(e, "committed, older than the %d kept" % keep) for e in committed[keep:] if e.step not in pins]
    for e in ours:
        fate = _fate(e, newest, current_generation, gens)
        if fate is not None:
            out[fate[0]].append((e, fate[1]))
    out["skipped"] += [(e, "left in place: " + e.reason if e.foreign else "%s layout: read-only" % e.format)
                       for e in entries if e.format != "launcher"]
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
