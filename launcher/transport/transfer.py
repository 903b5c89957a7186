"""Copying files to the login node: one file atomically (SFTP, else through the shell)
and a whole directory as one tar stream.

``put_file`` writes to a temp name beside the target, chmods it before a byte lands,
then renames it over the target; without SFTP on the server the same happens through
``sh``. ``put_tree`` sends one tar stream (one round trip whatever the number of files),
extracted into a temp dir beside the target and renamed into place. A full disk or an
exceeded quota is reported as ``RemoteDiskFullError``; other failures as ``StagingError``.
"""

from __future__ import annotations

import io
import logging
import os
import posixpath
import socket
import tarfile
import tempfile
import uuid
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import TYPE_CHECKING, Optional, Protocol, Sequence

from launcher.core.errors import LauncherError
from launcher.transport.cmdline import remote_command
from launcher.transport.errors import ConnectionLostError, RemoteCommandNotFound, RemoteDiskFullError, SSHError, StagingError
from launcher.transport.sdk import paramiko_module

if TYPE_CHECKING:
    from launcher.transport.pool import Connection


class SSHRunner(Protocol):
    """What a transfer needs of ``launcher.transport.ssh_runner.SSHRunner`` (which calls
    ``put_file`` and ``put_tree`` with itself): its pooled connection, a command channel fed
    from a file object, and ``run`` for a small query."""

    @property
    def where(self) -> str: ...

    def connection(self) -> "Connection": ...

    def exec_channel(self, command: str, source, timeout: float, argv: Sequence[str]) -> tuple[int, bytes, bytes]: ...

    def run(self, argv, *args, **kwargs): ...

log = logging.getLogger("launcher.ssh")  # the transport's one logger name

_TREE_SCRIPT = r"""
dest=$1 tmp=$2 old=$3
command -v tar >/dev/null 2>&1 || { echo "tar: not found" >&2; exit 127; }
mkdir -p -- "$tmp" || exit 3
if ! tar -x -f - -C "$tmp" --no-same-owner; then rm -rf -- "$tmp"; exit 3; fi
if [ -e "$dest" ] || [ -L "$dest" ]; then mv -- "$dest" "$old" || { rm -rf -- "$tmp"; exit 4; }; fi
mv -- "$tmp" "$dest" || exit 4
rm -rf -- "$old"
"""

_PUT_SCRIPT = r"""
tmp=$1 dest=$2 mode=$3
mkdir -p -- "$(dirname -- "$dest")" || exit 3
umask 077
if ! cat > "$tmp"; then rm -f -- "$tmp"; exit 3; fi
chmod "$mode" "$tmp" && mv -f -- "$tmp" "$dest" || { rm -f -- "$tmp"; exit 4; }
"""

_FULL_MARKERS = ("No space left on device", "Disk quota exceeded", "quota exceeded")


@dataclass(frozen=True)
class TreeStats:
    files: int
    bytes: int  # size of the tar stream sent


def remote_path(path: str) -> str:
    """SFTP and exec both start in the remote home: "~/x" is sent as "x"."""
    path = str(path)
    if path == "~":
        return "."
    if path.startswith("~/"):
        return path[2:] or "."
    if path.startswith("~"):
        raise StagingError(f"remote path {path!r}: only ~/ (the login user's home) is supported")
    return path


def put_file(runner: SSHRunner, path: str, content: bytes, mode: int = 0o644) -> None:
    """Write ``content`` to ``path`` on the remote host atomically: SFTP to a temp
    name in the same directory, chmod, then posix-rename over the target. Parent
    directories are created. ``~/`` means the login user's home."""
    if isinstance(content, str):
        content = content.encode()
    path = remote_path(path)
    conn = runner.connection()
    sftp = conn.sftp_client()
    if sftp is None:
        return _put_file_shell(runner, path, content, mode)
    paramiko = paramiko_module()

    d, base = posixpath.split(path)
    tmp = posixpath.join(d, f".{base}.tmp-{uuid.uuid4().hex[:12]}")
    log.debug("put_file %s:%s (%d bytes, mode %o)", runner.where, path, len(content), mode)
    with conn.sftp_lock:
        try:
            if d:
                _sftp_makedirs(sftp, d)
            _sftp_write(sftp, tmp, path, content, mode)
        except OSError as e:  # SFTP status errors are IOErrors; so are socket errors
            alive = bool(conn.transports) and conn.transports[-1].is_active()
            if alive and not isinstance(e, (socket.timeout, ConnectionError)):
                # SFTP says only "Failure" for ENOSPC/EDQUOT (no errno): then df decides
                raise _staging_error(runner, f"writing {path}", d, len(content), e,
                                     unexplained=e.errno is None) from None
            _lost(runner, conn, f"writing {path}", e)
        except (paramiko.SSHException, EOFError) as e:
            _lost(runner, conn, f"writing {path}", e)


def _sftp_write(sftp, tmp: str, path: str, content: bytes, mode: int) -> None:
    """Write ``tmp`` (mode set before any byte lands), check its size, rename it to
    ``path``; on failure ``tmp`` is removed."""
    paramiko = paramiko_module()

    try:
        with sftp.open(tmp, "wb") as f:
            sftp.chmod(tmp, mode)  # before any byte lands: secrets are never world-readable
            f.set_pipelined(True)
            f.write(content)
            # paramiko's close() checks pipelined replies *before* flushing its buffer and
            # ignores errors of the close itself: flush first so close() sees every write
            f.flush()
        size = sftp.stat(tmp).st_size
        if size != len(content):
            raise IOError(f"{tmp}: {size} of {len(content)} bytes written")
        sftp.posix_rename(tmp, path)
    except IOError:
        try:
            sftp.remove(tmp)
        except (IOError, paramiko.SSHException, EOFError):
            pass
        raise


def _lost(runner: SSHRunner, conn: Connection, what: str, e: BaseException):
    conn.invalidate(conn.transports[-1] if conn.transports else None)
    conn.sftp = None
    raise ConnectionLostError(f"connection to {runner.where} lost while {what}: {e or type(e).__name__}") from None


def _sftp_makedirs(sftp, d: str) -> None:
    parts, cur = [p for p in d.split("/") if p], "/" if d.startswith("/") else ""
    for p in parts:
        cur = posixpath.join(cur, p) if cur else p
        try:
            sftp.stat(cur)
        except FileNotFoundError:
            try:
                sftp.mkdir(cur)
            except IOError:
                sftp.stat(cur)  # made meanwhile by someone else: fine; else raise


def _put_file_shell(runner: SSHRunner, path: str, content: bytes, mode: int) -> None:
    put_file_by_command(runner, path, content, mode,
                        lambda line, data, argv: runner.exec_channel(line, io.BytesIO(data), 300, argv))


def put_file_by_command(runner, path: str, content: bytes, mode: int, send) -> None:
    """``put_file`` without SFTP: a small ``sh`` script on the remote side writes stdin to a temp
    name beside ``path`` (mode set first), then renames it over ``path``. ``send(cmdline, data,
    argv) -> (rc, stdout, stderr)`` runs the script with ``data`` on its stdin."""
    if isinstance(content, str):
        content = content.encode()
    path = remote_path(path)
    d, base = posixpath.split(path)
    tmp = posixpath.join(d, f".{base}.tmp-{uuid.uuid4().hex[:12]}")
    argv = ["sh", "-c", _PUT_SCRIPT, "sh", tmp, path, format(mode, "o")]
    log.debug("put_file %s:%s (%d bytes, mode %o)", runner.where, path, len(content), mode)
    rc, _, err = send(remote_command(argv), content, ["put_file", path])
    if rc:
        raise _staging_error(runner, f"writing {path}", d, len(content), err.decode("utf-8", "replace"))


def _staging_error(runner: SSHRunner, what: str, directory: str, need: int, detail,
                   unexplained: bool = False) -> SSHError:
    text = str(detail).strip()
    full = [line for line in text.splitlines() if any(m in line for m in _FULL_MARKERS)]
    if full:
        return RemoteDiskFullError(f"{what} on {runner.where} failed: the remote disk is full or over quota "
                                   f"({full[0].strip()})")
    if not unexplained:
        return StagingError(f"{what} on {runner.where} failed: {text}")
    free = _free_kib(runner, directory)
    if free is not None and free * 1024 < need:
        return RemoteDiskFullError(f"{what} on {runner.where} failed: the remote disk is full "
                                   f"({free} KiB free in {directory or '~'}, {need} bytes needed)")
    return StagingError(f"{what} on {runner.where} failed: {text} (the SFTP server gives no reason: "
                        "a path that is not a directory, or an exceeded disk quota?)")


def _free_kib(runner: SSHRunner, directory: str) -> Optional[int]:
    try:
        r = runner.run(["df", "-Pk", directory or "."], timeout=30, check=False)
        return int(r.stdout.strip().splitlines()[-1].split()[3])
    except (LauncherError, ValueError, IndexError):
        return None


def put_tree(runner: SSHRunner, local_dir: str, remote_dir: str, *, exclude: Sequence[str] = (),
             timeout: float = 600) -> TreeStats:
    """Copy a local directory to ``remote_dir`` as one tar stream (one round trip,
    whatever the number of files), extracted into a temp dir beside it and renamed
    into place: a job never sees a half-copied workdir. An existing ``remote_dir``
    is replaced whole (moved aside, then deleted). ``exclude``: fnmatch patterns
    matched against each relative path and each name (".git", "*.pyc", "data/*").
    Modes and mtimes are kept; owners are not; symlinks are copied as links."""
    local_dir = os.path.abspath(os.path.expanduser(local_dir))
    if not os.path.isdir(local_dir):
        raise StagingError(f"put_tree: {local_dir} is not a directory")
    remote_dir = remote_path(remote_dir).rstrip("/")
    if remote_dir in ("", ".", ".."):
        raise StagingError(f"put_tree: refusing to replace {remote_dir or '/'!r}")
    parent, name = posixpath.split(remote_dir)
    tag = uuid.uuid4().hex[:12]
    tmp = posixpath.join(parent, f".{name}.tmp-{tag}")
    old = posixpath.join(parent, f".{name}.old-{tag}")
    with tempfile.TemporaryFile() as spool:
        files = _write_tar(local_dir, spool, exclude)
        size = spool.tell()
        spool.seek(0)
        log.debug("put_tree %s -> %s:%s (%d files, %d bytes)", local_dir, runner.where, remote_dir, files, size)
        argv = ["sh", "-c", _TREE_SCRIPT, "sh", remote_dir, tmp, old]
        rc, _, err_b = runner.exec_channel(remote_command(argv), spool, timeout, ["put_tree", remote_dir])
    err = err_b.decode("utf-8", "replace")
    if rc == 127:
        raise RemoteCommandNotFound(["tar"], rc, "", err, runner.where)
    if rc:
        raise _staging_error(runner, f"staging {local_dir} to {remote_dir}", parent, size, err)
    return TreeStats(files=files, bytes=size)


def _excluded(rel: str, patterns: Sequence[str]) -> bool:
    base = posixpath.basename(rel)
    return any(fnmatch(rel, p) or fnmatch(base, p) for p in patterns)


def _write_tar(root: str, fileobj, exclude: Sequence[str]) -> int:
    count = 0

    def keep(ti: tarfile.TarInfo):
        nonlocal count
        rel = ti.name[2:] if ti.name.startswith("./") else ("" if ti.name == "." else ti.name)
        if rel and _excluded(rel, exclude):
            return None
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        if ti.isfile():
            count += 1
        return ti

    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(root, arcname=".", filter=keep)
    return count
