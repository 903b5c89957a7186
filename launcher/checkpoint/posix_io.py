"""POSIX helpers shared by the checkpoint stores: fsync, the open flags that never follow a
link or block on a FIFO, naming what a non-regular file is, and two walks of a local
directory (``safe_join`` for downloads, ``local_files`` for uploads). Stdlib only."""

from __future__ import annotations

import os
import stat as _stat

from launcher.checkpoint.contract import unsafe_rel_path
from launcher.checkpoint.errors import CheckpointError, UnsafePath

_CHUNK = 1 << 20


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a directory
        pass
    finally:
        os.close(fd)


def _fsync_fd(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a directory
        pass


def write_atomic(path, data, mode: int = 0o644, durable: bool = False) -> None:
    """Replace the file PATH with DATA (bytes or str) so that a reader sees the old file or
    the whole new one, never half of it: a uniquely named temp file in the same directory,
    renamed over PATH (and removed again if anything fails). DURABLE also fsyncs the file
    and the directory. Parent directories are created. The one atomic file write for local
    files outside a checkpoint (scripts, caches, records); checkpoint data goes through the
    stores, which also refuse links."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    write_atomic_stream(path, lambda f: f.write(raw), mode, durable)


def write_atomic_stream(path, fill, mode: int = 0o644, durable: bool = False) -> None:
    """``write_atomic`` of what FILL(file) writes (a stream: a copy, a socket's bytes)."""
    path = os.fspath(path)
    d = os.path.dirname(path) or "."
    # hidden, beside PATH, unique (O_EXCL: never a file someone else made)
    tmp = os.path.join(d, f".{os.path.basename(path)}.tmp-{os.getpid()}-{os.urandom(6).hex()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o600)
    except FileNotFoundError:  # its folder does not exist yet
        os.makedirs(d, exist_ok=True)
        fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            os.fchmod(f.fileno(), mode)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        _fsync_dir(d)


MAX_DEPTH = 64  # directory levels below a checkpoint: deeper is hostile (and would exhaust fds)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _NONBLOCK | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, word in ((_stat.S_ISLNK, "a symbolic link"), (_stat.S_ISFIFO, "a FIFO"),
                       (_stat.S_ISCHR, "a character device"), (_stat.S_ISBLK, "a block device"),
                       (_stat.S_ISSOCK, "a socket"), (_stat.S_ISDIR, "a directory"),
                       (_stat.S_ISREG, "a regular file")):
        if test(mode):
            return word
    return "not a regular file"


def _ioerror(where: str, e: OSError, what: str = "cannot write") -> CheckpointError:
    return CheckpointError("%s: %s: %s" % (where, what, e.strerror or e))


def safe_join(dest: str, relp: str) -> str:
    """DEST/relp, refused (UnsafePath) unless RELP is a plain relative path and the result,
    with every existing link resolved, stays inside DEST."""
    why = unsafe_rel_path(relp)
    if why:
        raise UnsafePath("%s: refused to write %r: the path %s" % (dest, relp, why))
    base = os.path.realpath(dest)
    p = os.path.join(base, *relp.split("/"))
    real = os.path.realpath(p)
    if os.path.commonpath([base, real]) != base or real == base:
        raise UnsafePath("%s: refused to write %r: it resolves to %s, outside" % (dest, relp, real))
    return p


def local_files(local_dir: str):
    """[(relative path, absolute path)] of the regular files under LOCAL_DIR, sorted.
    CheckpointError if anything else is there (a link, a FIFO): a checkpoint holds regular
    files only, and a link would upload whatever it points at."""
    out = []
    for dirpath, dirnames, filenames in os.walk(local_dir):
        dirnames.sort()
        for name in list(dirnames) + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if _stat.S_ISDIR(st.st_mode):
                continue
            relp = os.path.relpath(p, local_dir).replace(os.sep, "/")
            if not _stat.S_ISREG(st.st_mode):
                raise CheckpointError("%s: is %s: a checkpoint holds regular files only (links are never "
                                      "followed)" % (p, kind_of(st.st_mode)))
            why = unsafe_rel_path(relp)
            if why:
                raise CheckpointError("%s: its name %s: cannot be listed in COMMIT.json" % (p, why))
            out.append((relp, p))
    return sorted(out)
