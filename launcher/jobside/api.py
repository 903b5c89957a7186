"""The checkpoint writer and reader a training program calls: save, commit, restore.

Stdlib only (see ``launcher.jobside``)."""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import time

from launcher.checkpoint import (COMMIT, AlreadyCommitted, CheckpointError, Superseded, attempt_key, check_fence,
                                 commit as _commit, gc as _gc, parse_manifest, read_attempt, read_generations,
                                 record_rejoin, scratch as _scratch, step_dir, write_attempt)
from launcher.checkpoint.contract import now_iso, parse_step_dir
from launcher.checkpoint.discovery import sha256_file
from launcher.jobside.env import PROG, ckpt_root, env_int, generation as _current_generation, resume_from, store_for
from launcher.jobside import tiered as _tiered
from launcher.jobside.heartbeat import auto_heartbeat
from launcher.jobside.signals import PREEMPT, preemption_requested


# ---------------------------------------------------------------- attempt record
def _record_save(store, gen, rec) -> None:
    """Append a save timing to ROOT/.launcher/attempts/g<G>.json (advisory, never fails)."""
    try:
        doc = read_attempt(store, gen) or {"generation": gen, "saves": []}
        doc.setdefault("saves", [])
        if PREEMPT["at"] is not None and not doc.get("preempt_signal_at"):
            doc["preempt_signal_at"] = datetime.datetime.fromtimestamp(
                PREEMPT["at"], datetime.timezone.utc).isoformat(timespec="microseconds")
        doc["saves"].append(rec)
        write_attempt(store, gen, doc)
    except Exception as e:  # the record is advisory: never break a save over it
        print("%s: warning: could not record save timing under %s: %s" % (PROG, store.url(attempt_key(gen)), e),
              file=sys.stderr)


# ---------------------------------------------------------------- writer
def _want_sha(sha256):
    if sha256 is not None:
        return bool(sha256)
    return os.environ.get("LAUNCHER_CKPT_SHA256", "").strip().lower() in ("1", "true", "yes")


def _hash_local_tree(d):
    out = {}
    for dirpath, _dirs, files in os.walk(d):
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, d).replace(os.sep, "/")] = sha256_file(p)
    return out


@contextlib.contextmanager
def save(step, root=None, generation=None, sha256=None, commit=True, run=None):
    """Context manager yielding a directory to write checkpoint STEP into.

    POSIX roots: the checkpoint directory ROOT/step-<N>.g<G>/ itself. S3 roots: a local
    staging directory, uploaded on clean exit. On clean exit COMMIT.json is written last
    (create-only); on an exception nothing is committed (the directory stays torn and
    is quarantined by gc later).

    GENERATION defaults to $LAUNCHER_GENERATION. Raises Superseded (before writing, or after
    committing) when a newer generation of the job has started: this process is a
    zombie and should exit. SHA256: hash every file into COMMIT.json (default
    $LAUNCHER_CKPT_SHA256, off). COMMIT=False: write files only (multi-writer: every
    rank saves with commit=False, then one rank calls commit(step) after a barrier).
    RUN defaults to $LAUNCHER_JOB_ID."""
    store = store_for(ckpt_root(root))
    gen = generation if generation is not None else _current_generation(store)
    step = int(step)
    name = step_dir(step, gen)
    auto_heartbeat()
    run = run if run is not None else (os.environ.get("LAUNCHER_JOB_ID") or None)
    want_sha = _want_sha(sha256)
    cfg = _tiers(root)
    if cfg is not None:  # multi-tier: this rank's part on the local tier, drained in the background
        with _tiered.save(cfg, store, step, gen, run=run, sha256=want_sha, commit=commit) as d:
            yield d
        return
    if commit:
        check_fence(store, step, gen)
    rec = {"step": step, "start": now_iso(), "committed": False, "preempt": preemption_requested(),
           "error": None}
    t0 = time.monotonic()
    d, staging = _open_target(store, name)
    try:
        try:
            yield d
        except BaseException as e:
            _record_failure(store, gen, rec, e, commit, t0)
            raise
        t1 = time.monotonic()
        try:
            manifest = _publish(store, d, name, step, gen, run, want_sha, staging is not None, commit)
        except BaseException as e:
            _record_failure(store, gen, rec, e, commit, t0, t1)
            raise
        t2 = time.monotonic()
        # a notice that arrived while this save was being written makes it the save the
        # program stops on: it counts as a save on notice, not a periodic one
        rec["preempt"] = rec["preempt"] or preemption_requested()
        if manifest is not None:
            rec.update(committed=True, files=len(manifest["files"]),
                       bytes=sum(f["size"] for f in manifest["files"]))
        rec.update(end=now_iso(), seconds=round(t2 - t0, 6), write_seconds=round(t1 - t0, 6),
                   commit_seconds=round(t2 - t1, 6))
        if commit:
            _record_save(store, gen, rec)
            _refuse_superseded(store, name, step, gen)
            _auto_gc(store)
    finally:
        if staging is not None:
            _scratch.release(staging)


def _open_target(store, name):
    """(directory the program writes into, S3 staging dir to release or None)."""
    if store.is_local:
        d = store.ensure_dir(name)  # a real directory under ROOT: never a link out of it
        if os.path.lexists(os.path.join(d, COMMIT)):
            raise AlreadyCommitted("%s: already committed (checkpoints are write-once)" % d)
        return d, None
    staging = _scratch.acquire(store.root, "save-" + name)  # cleans stale ones (kill -9) first
    return os.path.join(staging, _scratch.DATA), staging


def _publish(store, d, name, step, gen, run, want_sha, staged, commit):
    """Upload a staged copy (S3) and commit it: the manifest, or None with COMMIT=False."""
    shas = _hash_local_tree(d) if (want_sha and not store.is_local) else (True if want_sha else False)
    if staged:
        store.upload_tree(d, name)
    if commit:
        return _commit(store, step, gen, run=run, sha256=shas, fence=True)
    return None


def _record_failure(store, gen, rec, e, commit, t0, t1=None):
    rec["end"] = now_iso()
    rec["seconds"] = round(time.monotonic() - t0, 6)
    if t1 is not None:
        rec["write_seconds"] = round(t1 - t0, 6)
    rec["error"] = "%s: %s" % (type(e).__name__, e)
    if commit:
        _record_save(store, gen, rec)


def _refuse_superseded(store, name, step, gen):
    """Superseded when a newer generation started while this one was committing STEP."""
    gens = read_generations(store)
    if gens.generation > gen:
        fp = gens.fork_point(gen)
        raise Superseded("%s: committed step %d, but generation %d was superseded meanwhile by generation "
                         "%d%s; this attempt is a zombie and should exit"
                         % (store.url(name), step, gen, gens.generation,
                            " (the commit is a stale fork, never resumed from)"
                            if fp and step > fp[0] else ""),
                         gen, gens.generation, fp[0] if fp else None)


def _auto_gc(store) -> None:
    """After each commit, keep $LAUNCHER_CKPT_KEEP committed checkpoints (the spec's
    checkpoint.keep, exported by the job script): never the newest, torn ones quarantined.
    A failed gc is reported and never fails the save that triggered it."""
    keep = env_int("LAUNCHER_CKPT_KEEP")
    if not keep or keep < 1:
        return
    try:
        _gc(store, keep)
    except Exception as e:  # best effort: the commit already happened
        print("launcher-job: checkpoint gc skipped: %s: %s" % (type(e).__name__, e), file=sys.stderr, flush=True)


def commit(step, root=None, generation=None, sha256=None, run=None, after=None):
    """Commit checkpoint STEP of this generation from the files already under it (for
    multi-writer checkpoints saved with save(step, commit=False)). Returns the manifest.

    AFTER: a future (``torch.distributed.checkpoint.async_save``'s) whose completion means
    the files are written; commit waits for it (``after.result()``) first. With a local tier
    (``$LAUNCHER_CKPT_LOCAL``) every rank commits its own part and commit returns at once:
    the drainer waits for AFTER, commits the part locally and drains it (returns None)."""
    store = store_for(ckpt_root(root))
    gen = generation if generation is not None else _current_generation(store)
    run = run if run is not None else (os.environ.get("LAUNCHER_JOB_ID") or None)
    cfg = _tiers(root)
    if cfg is not None:
        if after is not None:
            _tiered.commit_after(cfg, store, int(step), gen, after, run=run, sha256=_want_sha(sha256))
            return None
        _tiered.commit_local(cfg, store, int(step), gen, run=run, sha256=_want_sha(sha256))
        return None
    if after is not None:
        after.result()
    return _commit(store, int(step), gen, run=run, sha256=_want_sha(sha256), fence=True)


def _tiers(root):
    """The tier settings when this save goes to the job's own root with a local tier."""
    if root is not None and root != os.environ.get("LAUNCHER_CKPT_ROOT"):
        return None
    return _tiered.config()


def drain(timeout=None) -> bool:
    """Wait (at most TIMEOUT seconds, default $LAUNCHER_CKPT_DRAIN_TIMEOUT) until every part
    saved so far is drained to the peer and the root; True if it finished. The drainer keeps
    running; at exit the same wait is made (bounded), then it stops."""
    return _tiered.wait_all(timeout)


@contextlib.contextmanager
def restore(path=None, verify=False):
    """Context manager yielding a local directory holding the checkpoint to resume from
    (PATH, default $LAUNCHER_RESUME_FROM), or None on a fresh start.

    POSIX: the directory itself, after checking again that it is a real directory (not a
    link) and that every file COMMIT.json lists is still a regular file of its size. S3: a
    local copy of exactly the files COMMIT.json lists (keys it does not list are never
    downloaded; a listed path that would land outside the copy is refused), sizes checked,
    sha256 too with VERIFY; removed on exit. A framework checkpoint on S3 (no COMMIT.json)
    is copied whole, every key checked the same way."""
    auto_heartbeat()
    cfg = _tiers(None) if path is None and os.environ.get("LAUNCHER_RESUME_TIER") else None
    if cfg is not None:  # each rank's part from the nearest complete copy (resume-env chose them)
        store = store_for(ckpt_root())
        with _tiered.restore(cfg, store, _current_generation(store)) as d:
            yield d
        _record_restored(d)
        return
    path = path if path is not None else resume_from()
    if not path:
        yield None
        return
    parent, _, name = path.rstrip("/").rpartition("/")
    if not parent or not name:
        raise CheckpointError("%s: not a checkpoint path" % path)
    store = store_for(parent)
    if store.is_local:
        _check_local(store, name, path, verify)
        yield path
        _record_restored(path)
        return
    tmp = _scratch.acquire(store.root, "restore-" + name)
    try:
        dest = os.path.join(tmp, _scratch.DATA)
        _download(store, name, path, dest, verify)
        yield dest
        _record_restored(dest)
    finally:
        _scratch.release(tmp)


def _record_restored(path) -> None:
    """Record in this generation's attempt record when the program had restored its checkpoint
    (the ``restore`` block ended without an error): the end of the report's restore clock.
    Rank 0 only (one writer of the record); advisory, never fails. The generation's first restore
    is kept: a later one in the same generation is no restore of its start (a torchft replica
    group restarted alone rejoins under the generation that went on; NVRx restarts inside the
    processes), and taking it would stretch the report's restore clock over the training since."""
    if path is None or not os.environ.get("LAUNCHER_BACKEND"):
        return
    try:
        rank = env_int("RANK")
        if (rank if rank is not None else (env_int("LAUNCHER_RANK") or 0)) != 0 or (
                rank is None and (env_int("LAUNCHER_NODE_RANK") or 0) != 0):
            return
        store = store_for(ckpt_root())
        gen = _current_generation(store)
        doc = read_attempt(store, gen) or {"generation": gen, "saves": []}
        if doc.get("restored"):
            return
        doc["restored"] = {"at": now_iso(), "step": env_int("LAUNCHER_RESUME_STEP")}
        write_attempt(store, gen, doc)
    except Exception as e:  # the record is advisory: never break a restore over it
        print("%s: warning: could not record the restore: %s" % (PROG, e), file=sys.stderr)


def _check_local(store, name, path, verify):
    if not store.exists_dir(name):
        if os.path.lexists(path):
            raise CheckpointError("%s: checkpoint to resume from is not a real directory (links are never "
                                  "followed)" % path)
        raise CheckpointError("%s: checkpoint to resume from does not exist" % path)
    raw, _ = store.read(name + "/" + COMMIT)
    if raw is None:
        return  # a framework layout: its own marker was checked when it was chosen
    sg = parse_step_dir(name)
    doc = parse_manifest(raw, path + "/" + COMMIT, *(sg or (None, None)))
    sizes = store.file_sizes(name, [f["path"] for f in doc["files"]])
    for f in doc["files"]:
        got = sizes.get(f["path"])
        if got != f["size"]:
            why = ("missing" if got is None else got if isinstance(got, str) else "size %d, COMMIT.json lists %d"
                   % (got, f["size"]))
            raise CheckpointError("%s/%s: no longer matches COMMIT.json: %s" % (path, f["path"], why))
        if verify and f.get("sha256") and store.sha256(name + "/" + f["path"]) != f["sha256"]:
            raise CheckpointError("%s/%s: sha256 mismatch" % (path, f["path"]))


def _download(store, name, path, dest, verify):
    raw, _ = store.read(name + "/" + COMMIT)
    if raw is None:
        sg = parse_step_dir(name)
        if sg is not None:
            raise CheckpointError("%s: no COMMIT.json: not a committed checkpoint" % path)
        # a framework layout: every key, each one checked (bar "folder/" markers some tools create)
        paths = sorted(p for p in store.list_tree(name) if p and not p.endswith("/"))
        store.download_files(name, paths, dest)
        return
    sg = parse_step_dir(name)
    doc = parse_manifest(raw, path + "/" + COMMIT, *(sg or (None, None)))  # every path validated
    files = doc["files"]
    store.download_files(name, [f["path"] for f in files], dest)
    with open(os.path.join(dest, COMMIT), "wb") as f:
        f.write(raw)
    for ent in files:
        p = os.path.join(dest, *ent["path"].split("/"))
        if not os.path.isfile(p) or os.path.getsize(p) != ent["size"]:
            raise CheckpointError("%s/%s: downloaded copy does not match COMMIT.json" % (path, ent["path"]))
        if verify and ent.get("sha256") and sha256_file(p) != ent["sha256"]:
            raise CheckpointError("%s/%s: sha256 mismatch" % (path, ent["path"]))




def restarted_in_process(restart, reason=""):
    """Tell the launcher that the run restarted inside its processes (NVIDIA Resiliency
    Extension's ``inprocess.Wrapper``: call it from rank 0 at the start of each iteration after
    the first, with ``call_wrapper.iteration``). RESTART: that iteration (an int >= 1); REASON: a
    short text (the exception). Recorded once per RESTART in this generation's record, where
    ``launcher status`` shows it as an in-job restart and ``launcher report`` counts it, as the
    job script's own restarts are. Advisory: False (and a warning on stderr) when the root could
    not be written; CheckpointError without a checkpoint root."""
    if isinstance(restart, bool) or not isinstance(restart, int) or restart < 1:
        raise ValueError("restarted_in_process: restart must be an int >= 1 (NVRx's call_wrapper.iteration), "
                         "not %r" % (restart,))
    store = store_for(ckpt_root())
    gen = _current_generation(store)
    entry = {"kind": "in_process", "restart": restart, "exit": None, "failed_at": now_iso(),
             "reason": str(reason)[:500]}
    try:
        record_rejoin(store, gen, entry)
    except (CheckpointError, OSError) as e:
        print("%s: could not record in-process restart %d under %s: %s" % (PROG, restart, store.root, e),
              file=sys.stderr)
        return False
    return True
