"""The job-side helper: runs inside the job, on compute nodes where only Python exists.

STDLIB ONLY (plus boto3 for s3:// roots): it imports nothing from ``launcher`` except
``launcher.checkpoint``, so ``stage_zip()`` can ship both as one zipapp and a rendered
script can run ``python3 launcher_job.pyz <command>`` where the launcher is not
installed. Supports Python 3.8+.

Commands (``python3 launcher_job.pyz CMD`` or ``python -m launcher.jobside CMD``)::

    resume-env [--root ROOT] [--job-id ID] [--attempt-hint N] [--verify]
        Run at EVERY start of the job, inside the job:
            env_lines=$(python3 launcher_job.pyz resume-env --root "$ROOT") || exit 1
            eval "$env_lines"
        Resolves the latest committed checkpoint, starts a new generation with
        compare-and-swap (recording the step it resumes from) and prints shell-quoted
            export LAUNCHER_CKPT_ROOT=...     the root, absolute
            export LAUNCHER_ATTEMPT=...       the new generation G
            export LAUNCHER_RESUME_FROM=...   checkpoint dir or s3:// URL; '' on a fresh start
            export LAUNCHER_RESUME_STEP=...   its step; -1 on a fresh start
        Exit 1 (and nothing on stdout) if ROOT is unusable. ROOT defaults to
        $LAUNCHER_CKPT_ROOT, the job id to $LAUNCHER_JOB_ID, the hint to $LAUNCHER_ATTEMPT
        (the new generation is max(recorded + 1, hint)).
        With --fresh (or $LAUNCHER_FRESH=1: the job was launched with --fresh) the
        job's first start (no generation of its job id recorded yet) starts over above
        every existing generation, so every older checkpoint becomes stale; its
        later starts resume its own checkpoints.
    latest [--root ROOT] [--verify] [--step]
        JSON {"path","step","generation","state","reason"} of the checkpoint a restart
        would resume from, or null; with --step only its step (-1 if none). Exit 0 either way.
    wait-commit [--root ROOT] --since-step N --timeout S [--interval S]
        Poll until a committed checkpoint with step > N exists (prints its JSON, exit 0),
        or S seconds pass (exit 1). N may be '' or -1 (any commit). Exit 2 if ROOT is unusable.
        On a preemption notice, take N *before* forwarding the signal, so a periodic
        checkpoint committed earlier does not count as the emergency one:
            since=$(python3 launcher_job.pyz latest --step)
            kill -USR1 "$child"
            python3 launcher_job.pyz wait-commit --since-step "$since" --timeout "$grace"
    gc [--root ROOT] --keep N [--dry-run] [--json]
        See ``launcher checkpoints --help``.
    stage DEST
        Write this helper as a zipapp to DEST.

Writer API for training programs::

    from launcher.jobside import (save, restore, resume_step, install_preemption_handler,
                                  preemption_requested, EXIT_PREEMPTED)
    install_preemption_handler()             # $LAUNCHER_PREEMPT_SIGNAL, default SIGUSR1
    with restore() as d:                     # None on a fresh start; S3: downloaded copy
        if d: load(d)
    start = resume_step() + 1 ...
    with save(step) as d:                    # a directory to write into (S3: local staging)
        write(d)                             # COMMIT.json only on clean exit
    if preemption_requested():
        sys.exit(EXIT_PREEMPTED)             # 75: checkpointed on notice, restart me

Environment read: LAUNCHER_CKPT_ROOT, LAUNCHER_ATTEMPT (the generation),
LAUNCHER_RESUME_FROM, LAUNCHER_RESUME_STEP, LAUNCHER_JOB_ID (recorded as "run" in
COMMIT.json), LAUNCHER_PREEMPT_SIGNAL, LAUNCHER_CKPT_SHA256=1 (hash every file at save),
LAUNCHER_STAGING_DIR (where S3 saves and restores are staged, under
launcher-staging-<uid>/<root hash>/; default $TMPDIR), LAUNCHER_HEARTBEAT_SECONDS
(see start_heartbeat; 0 turns the heartbeat off).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import pkgutil
import shlex
import signal
import sys
import tempfile
import time
import zipfile

from launcher.checkpoint import (COMMIT, META_DIR, AlreadyCommitted, CheckpointError, RootUnavailable, Superseded, attempt_key, check_fence,
                                 commit as _commit, gc as _gc, latest as _latest, open_store, parse_manifest,
                                 read_attempt, read_generations, start_generation, step_dir, write_attempt)
from launcher.checkpoint import scratch as _scratch
from launcher.checkpoint.contract import now_iso, parse_step_dir

EXIT_PREEMPTED = 75  # the program saved a checkpoint on a preemption notice and wants a restart
EXIT_SUPERSEDED = 3  # a newer attempt of this job is running: this one is a zombie


def stand_down(reason="", max_wait=None):
    """What a superseded attempt (a zombie) does once a commit was refused: stop writing.

    Under Slurm the live attempt is the *same* job restarted elsewhere, with the same job
    and step ids: a zombie that exits makes its srun and slurmstepd report that exit when
    the node reconnects, and slurmctld then ends the live run. So under Slurm it waits,
    writing nothing, until the scheduler cleans it up (at most LAUNCHER_STAND_DOWN_SECONDS,
    default one day). Elsewhere it exits with EXIT_SUPERSEDED (3)."""
    if reason:
        print("launcher-job: %s" % reason, file=sys.stderr, flush=True)
    if os.environ.get("SLURM_JOB_ID"):
        limit = float(max_wait if max_wait is not None else os.environ.get("LAUNCHER_STAND_DOWN_SECONDS", 86400))
        print("launcher-job: superseded under Slurm: waiting to be cleaned up instead of exiting",
              file=sys.stderr, flush=True)
        deadline = time.monotonic() + limit
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
            try:
                signal.signal(sig, signal.SIG_IGN)  # notices no longer concern this attempt
            except (ValueError, OSError):
                pass
        while time.monotonic() < deadline:
            time.sleep(min(30.0, max(0.0, deadline - time.monotonic())))
    sys.exit(EXIT_SUPERSEDED)
PROG = "launcher-job"

__all__ = ["EXIT_PREEMPTED", "EXIT_SUPERSEDED", "stand_down", "save", "commit", "restore", "resume_step", "resume_from", "generation",
           "ckpt_root", "latest_committed", "install_preemption_handler", "preemption_requested",
           "clear_preemption", "preempt_signals", "start_heartbeat", "stage_zip", "main"]


# ---------------------------------------------------------------- environment
_STORES = {}


def _store(root):
    """One store (so one S3 client and connection pool) per root for the process."""
    st = _STORES.get(root)
    if st is None:
        st = _STORES[root] = open_store(root)
    return st


def ckpt_root(root=None) -> str:
    root = root or os.environ.get("LAUNCHER_CKPT_ROOT", "")
    if not root:
        raise CheckpointError("no checkpoint root: set LAUNCHER_CKPT_ROOT (the launcher does) or pass root=")
    return root


def _env_int(name):
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    try:
        return int(v)
    except ValueError:
        raise CheckpointError("%s=%r is not an integer" % (name, v))


def generation(store=None) -> int:
    """This process's generation: $LAUNCHER_ATTEMPT, else the current one under ROOT."""
    g = _env_int("LAUNCHER_ATTEMPT")
    if g is not None:
        return g
    store = store or _store(ckpt_root())
    return read_generations(store).generation


_current_generation = generation


def resume_from() -> str:
    """$LAUNCHER_RESUME_FROM: the checkpoint to resume from, '' on a fresh start."""
    return os.environ.get("LAUNCHER_RESUME_FROM", "")


def resume_step() -> int:
    """$LAUNCHER_RESUME_STEP as an int; -1 on a fresh start."""
    v = _env_int("LAUNCHER_RESUME_STEP")
    return -1 if v is None else v


def latest_committed(root=None, verify=False):
    """{"path","step","generation","state","reason"} of the newest committed checkpoint, or None."""
    e = _latest(_store(ckpt_root(root)), verify=verify)
    return e.to_dict() if e else None


# ---------------------------------------------------------------- preemption
_PREEMPT = {"requested": False, "signum": None, "at": None, "installed": {}}


def preempt_signals(spec=None):
    """Signal numbers from SPEC or $LAUNCHER_PREEMPT_SIGNAL ('USR1', 'SIGUSR2', '10',
    'USR1,TERM'); default SIGUSR1."""
    raw = spec if spec is not None else (os.environ.get("LAUNCHER_PREEMPT_SIGNAL") or "USR1")
    out = []
    for tok in str(raw).replace(",", " ").split():
        t = tok.strip().upper()
        if t.isdigit():
            out.append(int(t))
            continue
        if not t.startswith("SIG"):
            t = "SIG" + t
        sig = getattr(signal, t, None)
        if not isinstance(sig, int) or t.startswith("SIG_"):
            raise ValueError("unknown signal %r in LAUNCHER_PREEMPT_SIGNAL" % tok)
        out.append(int(sig))
    return out or [int(signal.SIGUSR1)]


def _on_preempt(signum, frame):
    _PREEMPT["requested"] = True
    _PREEMPT["signum"] = signum
    if _PREEMPT["at"] is None:
        _PREEMPT["at"] = time.time()
    prev = _PREEMPT["installed"].get(signum)
    if callable(prev) and prev is not signal.default_int_handler:
        prev(signum, frame)


def install_preemption_handler(signals=None):
    """Turn the preemption signal(s) into a flag polled with preemption_requested().
    SIGNALS: list of numbers/names, default from $LAUNCHER_PREEMPT_SIGNAL (SIGUSR1).
    A handler installed before is still called. Returns the signal numbers."""
    if signals is None:
        nums = preempt_signals()
    else:
        nums = preempt_signals(" ".join(str(int(s)) if not isinstance(s, str) else s for s in signals))
    for n in nums:
        prev = signal.signal(n, _on_preempt)
        if prev is not _on_preempt:
            _PREEMPT["installed"][n] = prev
    _auto_heartbeat()
    return nums


def preemption_requested() -> bool:
    return bool(_PREEMPT["requested"])


def clear_preemption() -> None:
    _PREEMPT["requested"] = False
    _PREEMPT["signum"] = None
    _PREEMPT["at"] = None


# ---------------------------------------------------------------- attempt record
_ATTEMPT_CACHE = {}


def _record_save(store, gen, rec) -> None:
    """Append a save timing to ROOT/.launcher/attempts/g<G>.json (advisory, never fails)."""
    try:
        key = (store.root, gen)
        doc = _ATTEMPT_CACHE.get(key)
        if doc is None:
            doc = read_attempt(store, gen) or {"generation": gen, "saves": []}
            doc.setdefault("saves", [])
            _ATTEMPT_CACHE[key] = doc
        if _PREEMPT["at"] is not None and not doc.get("preempt_signal_at"):
            import datetime

            doc["preempt_signal_at"] = datetime.datetime.fromtimestamp(
                _PREEMPT["at"], datetime.timezone.utc).isoformat(timespec="microseconds")
        doc["saves"].append(rec)
        write_attempt(store, gen, doc)
    except Exception as e:  # the record is advisory: never break a save over it
        print("%s: warning: could not record save timing under %s: %s" % (PROG, store.url(attempt_key(gen)), e),
              file=sys.stderr)


# ---------------------------------------------------------------- heartbeat
_HEARTBEAT = {"thread": None}


def heartbeat_key(gen) -> str:
    return "%s/attempts/g%d.heartbeat" % (META_DIR, int(gen))


def start_heartbeat(root=None, interval=None):
    """Write ROOT/.launcher/attempts/g<G>.heartbeat ({"at": ISO, "interval": s, ...}) every
    INTERVAL seconds from a daemon thread, so ``launcher report`` can tell when a crashed
    node died (the scheduler notices only later; without it, that delay counts as lost
    work). INTERVAL: $LAUNCHER_HEARTBEAT_SECONDS, else 10 (POSIX root) or 30 (S3); 0 turns
    it off. Started once per process by restore(), save() and install_preemption_handler()
    inside a launcher job ($LAUNCHER_BACKEND set). Advisory: never raises. Returns the
    thread, or None."""
    if _HEARTBEAT["thread"] is not None:
        return _HEARTBEAT["thread"]
    try:
        root = root or os.environ.get("LAUNCHER_CKPT_ROOT", "")
        gen = _env_int("LAUNCHER_ATTEMPT")
        if not root or gen is None:
            return None
        store = open_store(root)  # its own store: its requests are not the writer's
        if interval is None:
            raw = os.environ.get("LAUNCHER_HEARTBEAT_SECONDS", "").strip()
            interval = float(raw) if raw else (10.0 if store.is_local else 30.0)
        if interval <= 0:
            return None
        import socket
        import threading

        key = heartbeat_key(gen)
        base = {"generation": gen, "host": socket.gethostname(), "pid": os.getpid(), "interval": interval}

        def beat():
            while True:
                try:
                    store.put(key, (json.dumps(dict(base, at=now_iso())) + "\n").encode())
                except Exception:  # a missed beat only makes the crash time less precise
                    pass
                time.sleep(interval)

        t = threading.Thread(target=beat, name="launcher-heartbeat", daemon=True)
        _HEARTBEAT["thread"] = t
        t.start()
        return t
    except Exception:
        return None


def _auto_heartbeat():
    if _HEARTBEAT["thread"] is None and os.environ.get("LAUNCHER_BACKEND"):
        start_heartbeat()


# ---------------------------------------------------------------- writer
def _want_sha(sha256):
    if sha256 is not None:
        return bool(sha256)
    return os.environ.get("LAUNCHER_CKPT_SHA256", "").strip().lower() in ("1", "true", "yes")


def _hash_local_tree(d):
    from launcher.checkpoint.discovery import sha256_file

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

    GENERATION defaults to $LAUNCHER_ATTEMPT. Raises Superseded (before writing, or after
    committing) when a newer generation of the job has started: this process is a
    zombie and should exit. SHA256: hash every file into COMMIT.json (default
    $LAUNCHER_CKPT_SHA256, off). COMMIT=False: write files only (multi-writer: every
    rank saves with commit=False, then one rank calls commit(step) after a barrier).
    RUN defaults to $LAUNCHER_JOB_ID."""
    root = ckpt_root(root)
    store = _store(root)
    gen = generation if generation is not None else _current_generation(store)
    step = int(step)
    name = step_dir(step, gen)
    _auto_heartbeat()
    run = run if run is not None else (os.environ.get("LAUNCHER_JOB_ID") or None)
    want_sha = _want_sha(sha256)
    if commit:
        check_fence(store, step, gen)
    rec = {"step": step, "start": now_iso(), "committed": False, "preempt": preemption_requested(),
           "error": None}
    t0 = time.monotonic()
    staging = None
    if store.is_local:
        d = store.ensure_dir(name)  # a real directory under ROOT: never a link out of it
        if os.path.lexists(os.path.join(d, COMMIT)):
            raise AlreadyCommitted("%s: already committed (checkpoints are write-once)" % d)
    else:
        staging = _scratch.acquire(store.root, "save-" + name)  # cleans stale ones (kill -9) first
        d = os.path.join(staging, _scratch.DATA)
    try:
        try:
            yield d
        except BaseException as e:
            rec.update(end=now_iso(), seconds=round(time.monotonic() - t0, 6), error="%s: %s" % (type(e).__name__, e))
            if commit:
                _record_save(store, gen, rec)
            raise
        t1 = time.monotonic()
        try:
            shas = _hash_local_tree(d) if (want_sha and not store.is_local) else (True if want_sha else False)
            if staging is not None:
                store.upload_tree(d, name)
            manifest = None
            if commit:
                manifest = _commit(store, step, gen, run=run, sha256=shas, fence=True)
        except BaseException as e:
            rec.update(end=now_iso(), seconds=round(time.monotonic() - t0, 6), write_seconds=round(t1 - t0, 6),
                       error="%s: %s" % (type(e).__name__, e))
            if commit:
                _record_save(store, gen, rec)
            raise
        t2 = time.monotonic()
        if manifest is not None:
            rec.update(committed=True, files=len(manifest["files"]),
                       bytes=sum(f["size"] for f in manifest["files"]))
        rec.update(end=now_iso(), seconds=round(t2 - t0, 6), write_seconds=round(t1 - t0, 6),
                   commit_seconds=round(t2 - t1, 6))
        if commit:
            _record_save(store, gen, rec)
            gens = read_generations(store)
            if gens.generation > gen:
                fp = gens.fork_point(gen)
                raise Superseded("%s: committed step %d, but generation %d was superseded meanwhile by generation "
                                 "%d%s; this attempt is a zombie and should exit"
                                 % (store.url(name), step, gen, gens.generation,
                                    " (the commit is a stale fork, never resumed from)"
                                    if fp and step > fp[0] else ""),
                                 gen, gens.generation, fp[0] if fp else None)
            _auto_gc(store)
    finally:
        if staging is not None:
            _scratch.release(staging)


def _auto_gc(store) -> None:
    """After each commit, keep $LAUNCHER_CKPT_KEEP committed checkpoints (the spec's
    checkpoint.keep, exported by the job script): never the newest, torn ones quarantined.
    A failed gc is reported and never fails the save that triggered it."""
    keep = _env_int("LAUNCHER_CKPT_KEEP")
    if not keep or keep < 1:
        return
    try:
        _gc(store, keep)
    except Exception as e:  # best effort: the commit already happened
        print("launcher-job: checkpoint gc skipped: %s: %s" % (type(e).__name__, e), file=sys.stderr, flush=True)


def commit(step, root=None, generation=None, sha256=None, run=None) -> dict:
    """Commit checkpoint STEP of this generation from the files already under it (for
    multi-writer checkpoints saved with save(step, commit=False)). Returns the manifest."""
    store = _store(ckpt_root(root))
    gen = generation if generation is not None else _current_generation(store)
    run = run if run is not None else (os.environ.get("LAUNCHER_JOB_ID") or None)
    return _commit(store, int(step), gen, run=run, sha256=_want_sha(sha256), fence=True)


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
    path = path if path is not None else resume_from()
    _auto_heartbeat()
    if not path:
        yield None
        return
    parent, _, name = path.rstrip("/").rpartition("/")
    if not parent or not name:
        raise CheckpointError("%s: not a checkpoint path" % path)
    store = _store(parent)
    if store.is_local:
        _check_local(store, name, path, verify)
        yield path
        return
    tmp = _scratch.acquire(store.root, "restore-" + name)
    try:
        dest = os.path.join(tmp, _scratch.DATA)
        _download(store, name, path, dest, verify)
        yield dest
    finally:
        _scratch.release(tmp)


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
    from launcher.checkpoint.discovery import sha256_file

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


# ---------------------------------------------------------------- zipapp
_ZIP_MAIN = "import sys\nfrom launcher.jobside import main\nsys.exit(main())\n"


def _module_source(modname: str) -> str:
    spec = importlib.util.find_spec(modname)
    src = spec.loader.get_source(modname) if spec and spec.loader else None
    if src is None:
        raise CheckpointError("cannot read the source of %s for the job-side zipapp" % modname)
    return src


def stage_zip(dest_path) -> str:
    """Write a zipapp holding launcher/__init__.py (a stub), launcher/jobside.py and
    launcher/checkpoint/*.py (plus __main__.py) to DEST_PATH, atomically. Byte-for-byte
    reproducible. Run it with ``python3 DEST <command>``; put it on PYTHONPATH to make
    ``from launcher.jobside import save`` work in a program. Returns DEST_PATH."""
    import launcher
    import launcher.checkpoint as ck

    version = getattr(launcher, "__version__", "0")
    files = {
        "__main__.py": _ZIP_MAIN,
        "launcher/__init__.py": '"""launcher: job-side subset (launcher.jobside, launcher.checkpoint)."""\n\n'
                                "__version__ = %r\n" % version,
        "launcher/jobside.py": _module_source("launcher.jobside"),
        "launcher/nodeguard.py": _module_source("launcher.nodeguard"),
        "launcher/checkpoint/__init__.py": _module_source("launcher.checkpoint"),
    }
    for mi in pkgutil.iter_modules(ck.__path__):
        if not mi.ispkg:
            files["launcher/checkpoint/%s.py" % mi.name] = _module_source("launcher.checkpoint." + mi.name)
    dest_path = os.path.abspath(str(dest_path))
    d = os.path.dirname(dest_path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".launcher_job.pyz.tmp-")
    try:
        with os.fdopen(fd, "wb") as raw:
            raw.write(b"#!/usr/bin/env python3\n")
            with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as z:
                for arc in sorted(files):
                    zi = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
                    zi.external_attr = 0o644 << 16
                    zi.compress_type = zipfile.ZIP_DEFLATED
                    z.writestr(zi, files[arc])
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest_path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return dest_path


# ---------------------------------------------------------------- CLI
def _export_lines(env) -> str:
    return "".join("export %s=%s\n" % (k, shlex.quote(str(v))) for k, v in env)


def cmd_resume_env(a) -> int:
    store = open_store(ckpt_root(a.root))
    store.check_root(create=True)
    if not store.is_local:
        for p in _scratch.clean_stale(store.root):  # left by a save or restore killed with -9
            print("%s: removed stale staging %s" % (PROG, p), file=sys.stderr)
    hint = a.attempt_hint if a.attempt_hint is not None else _env_int("LAUNCHER_ATTEMPT")
    job_id = a.job_id or os.environ.get("LAUNCHER_JOB_ID") or None
    fresh = a.fresh or os.environ.get("LAUNCHER_FRESH", "").strip() == "1"
    gens, found, log = start_generation(store, job_id=job_id, hint=hint, verify=a.verify, fresh=fresh)
    rec = gens.record(gens.generation) or {}
    if rec.get("fresh") is True:
        print("%s: generation %d starts over (the job was launched with --fresh): every checkpoint of an "
              "earlier generation under %s stays on disk and is never resumed from"
              % (PROG, gens.generation, store.root), file=sys.stderr)
    skipped = [e for e in log if not e.committed]
    for e in skipped[:5]:
        print("%s: skipped %s: %s" % (PROG, e.path, e.reason), file=sys.stderr)
    if len(skipped) > 5:
        print("%s: skipped %d more newer checkpoints" % (PROG, len(skipped) - 5), file=sys.stderr)
    if found:
        print("%s: generation %d resumes from %s (step %d)" % (PROG, gens.generation, found.path, found.step),
              file=sys.stderr)
    elif rec.get("fresh") is not True:
        print("%s: generation %d starts fresh (no committed checkpoint under %s)"
              % (PROG, gens.generation, store.root), file=sys.stderr)
    sys.stdout.write(_export_lines([
        ("LAUNCHER_CKPT_ROOT", store.root),
        ("LAUNCHER_ATTEMPT", gens.generation),
        ("LAUNCHER_RESUME_FROM", found.path if found else ""),
        ("LAUNCHER_RESUME_STEP", found.step if found else -1),
    ]))
    sys.stdout.flush()
    return 0


def cmd_latest(a) -> int:
    e = _latest(open_store(ckpt_root(a.root)), verify=a.verify)
    if a.step:
        print(e.step if e else -1)
    else:
        print(json.dumps(e.to_dict() if e else None))
    return 0


def cmd_wait_commit(a) -> int:
    since = -1 if str(a.since_step).strip() == "" else int(a.since_step)
    store = open_store(ckpt_root(a.root))
    deadline = time.monotonic() + max(0.0, a.timeout)
    last_err = None
    while True:
        try:
            e = _latest(store)
            last_err = None
        except RootUnavailable:
            raise
        except Exception as err:  # transient (network): keep polling until the deadline
            e, last_err = None, err
        if e is not None and e.step > since:
            print(json.dumps(e.to_dict()))
            return 0
        left = deadline - time.monotonic()
        if left <= 0:
            print("%s: no commit newer than step %d under %s within %gs%s"
                  % (PROG, since, store.root, a.timeout, " (last error: %s)" % last_err if last_err else ""),
                  file=sys.stderr)
            return 1
        time.sleep(min(a.interval, left))


def cmd_gc(a) -> int:
    store = open_store(ckpt_root(a.root))
    store.check_root()
    rep = _gc(store, a.keep, dry_run=a.dry_run)
    if a.json:
        print(json.dumps(rep, indent=1))
    else:
        for k in ("deleted", "quarantined", "skipped"):
            for x in rep[k]:
                print("%s%s %s%s" % ("would " if a.dry_run and k != "skipped" else "", k[:-1] if k != "skipped"
                                     else "skipped", x if isinstance(x, str) else x["path"],
                                     "" if isinstance(x, str) else ": " + x["reason"]))
        print("kept %d committed" % len(rep["kept"]))
    return 0


def cmd_node_guard(a) -> int:
    from launcher.nodeguard import guard

    return guard(a.job_dir)


def cmd_stage(a) -> int:
    print(stage_zip(a.dest))
    return 0


def _parser():
    p = argparse.ArgumentParser(prog=PROG, description="Job-side checkpoint helper (stdlib only).")
    sub = p.add_subparsers(dest="cmd")
    sub.required = True

    def root_arg(sp):
        sp.add_argument("--root", default=None, help="checkpoint ROOT (default: $LAUNCHER_CKPT_ROOT)")

    sp = sub.add_parser("resume-env", help="start a new generation; print export lines for eval")
    root_arg(sp)
    sp.add_argument("--job-id", default=None)
    sp.add_argument("--attempt-hint", type=int, default=None)
    sp.add_argument("--verify", action="store_true", help="check sha256 of the chosen checkpoint too")
    sp.add_argument("--fresh", action="store_true",
                    help="the job was launched with --fresh (default: $LAUNCHER_FRESH=1): its first start "
                         "resumes from nothing and makes every older checkpoint stale")
    sp.set_defaults(fn=cmd_resume_env)

    sp = sub.add_parser("latest", help="print the latest committed checkpoint as JSON (or null)")
    root_arg(sp)
    sp.add_argument("--verify", action="store_true")
    sp.add_argument("--step", action="store_true", help="print only its step (-1 if none)")
    sp.set_defaults(fn=cmd_latest)

    sp = sub.add_parser("wait-commit", help="wait for a commit newer than --since-step")
    root_arg(sp)
    sp.add_argument("--since-step", required=True)
    sp.add_argument("--timeout", type=float, required=True)
    sp.add_argument("--interval", type=float, default=0.5)
    sp.set_defaults(fn=cmd_wait_commit)

    sp = sub.add_parser("gc", help="keep N committed checkpoints, quarantine torn ones")
    root_arg(sp)
    sp.add_argument("--keep", type=int, required=True)
    sp.add_argument("--dry-run", action="store_true")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_gc)

    sp = sub.add_parser("node-guard", help="Slurm: steer requeues away from nodes that keep failing this job")
    sp.add_argument("--job-dir", required=True)
    sp.set_defaults(fn=cmd_node_guard)

    sp = sub.add_parser("stage", help="write this helper as a zipapp")
    sp.add_argument("dest")
    sp.set_defaults(fn=cmd_stage)
    return p


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    try:
        return a.fn(a)
    except RootUnavailable as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 2 if a.cmd == "wait-commit" else 1
    except (CheckpointError, ValueError) as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 1
    except OSError as e:  # a full disk, a read-only or vanished file system: one line, no traceback
        where = " ".join(str(x) for x in (e.filename, e.filename2) if x)
        print("%s: error: %s%s" % (PROG, where + ": " if where else "", e.strerror or e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
