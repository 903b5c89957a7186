"""Local scratch space for S3 checkpoints: where ``save()`` stages a checkpoint before
uploading it and ``restore()`` downloads one. Stdlib only (runs on compute nodes).

A kill -9 mid-save must not leave a full copy of a checkpoint behind forever, so scratch
lives in one well-known place per user and per checkpoint root::

    $LAUNCHER_STAGING_DIR (default: the temp dir)/launcher-staging-<uid>/<sha256(root)[:16]>/
        <label>.<pid>.<random>/owner.json   who is using it: pid, process start time, boot id, host
        <label>.<pid>.<random>/data/        the checkpoint being written or read

An entry is created under a hidden temporary name and renamed into place only once its
``owner.json`` is written, so every visible entry names its owner. ``clean_stale(root)``
(called by every save, restore and job start) removes the entries whose owner is dead on
this host: the pid is gone, or it is alive but started at another time (pid reused), or
the machine rebooted since. It never removes a live writer's entry, nor one written by
another host (a shared staging dir), nor anything outside the per-root folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat as _stat
import tempfile
import time

from launcher.checkpoint.errors import CheckpointError

OWNER = "owner.json"
DATA = "data"
_TMP_GRACE_S = 3600.0  # a hidden half-made entry older than this was left by a crash


def base_dir() -> str:
    return os.environ.get("LAUNCHER_STAGING_DIR") or tempfile.gettempdir()


def _boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def process_start(pid: int):
    """The start time of PID in clock ticks since boot (Linux /proc), or None."""
    try:
        with open("/proc/%d/stat" % int(pid), "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    try:
        return int(raw[raw.rindex(")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


def _owner_doc() -> dict:
    pid = os.getpid()
    return {"pid": pid, "start": process_start(pid), "boot": _boot_id(), "host": socket.gethostname(),
            "created": time.time()}


def owner_alive(doc) -> bool:
    """Whether the process named by an owner.json may still be using its entry. Unknown
    (another host, unreadable) counts as alive: never remove what might be in use."""
    if not isinstance(doc, dict) or not isinstance(doc.get("pid"), int):
        return True
    if doc.get("host") != socket.gethostname():
        return True
    boot = _boot_id()
    if boot and doc.get("boot") and doc["boot"] != boot:
        return False  # rebooted since: every process of that boot is gone
    pid = doc["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    except OSError:
        return True
    start = process_start(pid)
    if start is not None and doc.get("start") is not None and start != doc["start"]:
        return False  # the pid was reused by another process
    return True


def _user_dir(create: bool):
    """BASE/launcher-staging-<uid>: a real directory owned by this user (0700)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    d = os.path.join(base_dir(), "launcher-staging-%d" % uid)
    if create:
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
        except OSError as e:
            raise CheckpointError("%s: cannot create the staging directory: %s" % (d, e.strerror or e))
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CheckpointError("%s: cannot use the staging directory: %s" % (d, e.strerror or e))
    if not _stat.S_ISDIR(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != uid):
        raise CheckpointError("%s: not a directory owned by this user (uid %d): refusing to stage checkpoints "
                              "there; set LAUNCHER_STAGING_DIR" % (d, uid))
    return d


def root_dir(root: str, create: bool = False):
    """The per-root scratch folder for checkpoint ROOT (None if absent and not CREATE)."""
    u = _user_dir(create)
    if u is None:
        return None
    d = os.path.join(u, hashlib.sha256(str(root).encode()).hexdigest()[:16])
    if create:
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            with open(os.path.join(d, "ROOT"), "w") as f:  # for a human looking at the folder
                f.write(str(root) + "\n")
        except OSError as e:
            raise CheckpointError("%s: cannot create the staging directory: %s" % (d, e.strerror or e))
    elif not os.path.isdir(d):
        return None
    return d


def acquire(root: str, label: str) -> str:
    """A new scratch entry for ROOT owned by this process; returns its entry folder (write
    into ``entry/data``, created empty). Stale entries of ROOT are cleaned first."""
    clean_stale(root)
    d = root_dir(root, create=True)
    tag = "%s.%d.%s" % (label, os.getpid(), os.urandom(4).hex())
    tmp = os.path.join(d, ".tmp-" + tag)
    try:
        os.mkdir(tmp, 0o700)
        os.mkdir(os.path.join(tmp, DATA), 0o700)
        with open(os.path.join(tmp, OWNER), "w") as f:
            json.dump(_owner_doc(), f)
        final = os.path.join(d, tag)
        os.rename(tmp, final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError("%s: cannot create a staging folder: %s" % (d, e.strerror or e))
    return final


def release(entry: str) -> None:
    shutil.rmtree(entry, ignore_errors=True)


def _read_owner(entry: str):
    try:
        with open(os.path.join(entry, OWNER), "rb") as f:
            return json.loads(f.read(65536).decode("utf-8"))
    except (OSError, ValueError):
        return None


def clean_stale(root: str) -> list:
    """Remove ROOT's scratch entries whose owner is dead; returns the paths removed.
    Never raises: cleaning is best effort and must not fail a save or a start."""
    removed = []
    try:
        d = root_dir(root)
        if d is None:
            return removed
        now = time.time()
        with os.scandir(d) as it:
            entries = list(it)
        for e in entries:
            if not e.is_dir(follow_symlinks=False):
                continue
            if e.name.startswith(".tmp-"):
                try:
                    stale = now - e.stat(follow_symlinks=False).st_mtime > _TMP_GRACE_S
                except OSError:
                    continue
            else:
                doc = _read_owner(e.path)
                stale = doc is not None and not owner_alive(doc)
            if stale:
                shutil.rmtree(e.path, ignore_errors=True)
                if not os.path.lexists(e.path):
                    removed.append(e.path)
    except (OSError, CheckpointError):
        pass
    return removed
