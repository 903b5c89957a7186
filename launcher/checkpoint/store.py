"""Storage under a checkpoint ROOT: a POSIX directory, or ``s3://bucket/prefix``.

Stdlib only; boto3 is imported lazily and only for S3 roots. Keys are '/'-separated
paths relative to ROOT. Both stores offer the same small set of operations the
contract needs:

- ``list_top()``: the names one level under ROOT (directories, files with sizes, and on
  POSIX the links and special files, which are never followed). S3: ListObjectsV2 with
  ``Delimiter='/'``, paginated: one request per 1,000 names, never one per object.
- ``file_sizes(dir, paths)``: sizes of the files a manifest lists (POSIX: one lstat
  each, a non-regular file reported as what it is; S3: one paginated listing of the
  checkpoint's prefix).
- ``read(key)`` reads manifests and markers only: regular files, at most
  ``MAX_MANIFEST_BYTES`` (16 MiB); on POSIX opened O_NONBLOCK|O_NOFOLLOW and checked with
  fstat first, so a FIFO or a device never blocks (``UnsafePath`` instead).
- ``download_files(dir, paths, dest)`` (S3): exactly the listed files, every target
  checked to stay inside DEST (``safe_join``).
- ``put_if_absent(key, data)``: create-only. POSIX: write a temp file, fsync, ``link``
  it to the final name (fails with EEXIST, also on NFS), fsync the directory. S3:
  ``PutObject`` with ``If-None-Match: *`` (412 -> ``Conflict``).
- ``read(key)`` -> ``(bytes, token)`` and ``put_if_match(key, data, token)``:
  compare-and-swap. POSIX: ``flock`` on a sidecar ``KEY.lock`` + compare the
  sha256 of the current bytes + ``os.replace``. S3: ``If-Match: <ETag>`` (or
  ``If-None-Match: *`` when the object must not exist yet).

S3 endpoint: ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL`` (so tests point at moto).
Every S3 request is counted in ``S3Store.requests`` (by operation name).
"""

from __future__ import annotations

import collections
import errno
import hashlib
import os
import stat as _stat
import threading

from .contract import MAX_MANIFEST_BYTES, unsafe_rel_path
from .errors import CheckpointError, Conflict, RootUnavailable, UnsafePath

_CHUNK = 1 << 20


def is_s3(root: str) -> bool:
    return str(root).startswith("s3://")


def open_store(root: str):
    """A store for ROOT (POSIX path or s3://bucket/prefix). Does no I/O on POSIX."""
    root = str(root)
    if not root:
        raise RootUnavailable("checkpoint root is empty (set --root or LAUNCHER_CKPT_ROOT)")
    if is_s3(root):
        rest = root[len("s3://"):]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise RootUnavailable("%s: no bucket name in the S3 URL" % root)
        return S3Store(bucket, prefix)
    if "://" in root:
        raise RootUnavailable("%s: checkpoint root must be a POSIX path or s3://bucket/prefix" % root)
    return LocalStore(root)


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


class LocalStore:
    """ROOT is a directory on a POSIX file system (local or shared: NFS, Lustre, GPFS).

    Paths from storage are hostile. ROOT itself may be a symbolic link (resolved once, at
    each operation); *below* ROOT nothing is followed: every operation walks from a
    descriptor of ROOT one component at a time with O_NOFOLLOW, so a symlinked step
    directory, file, ``.quarantine`` or ``.launcher`` raises UnsafePath instead of reaching
    outside ROOT. Files are opened O_NONBLOCK and checked with fstat to be regular before
    a byte is read, so a FIFO or device named COMMIT.json never blocks; manifests and
    markers are read up to MAX_MANIFEST_BYTES."""

    is_local = True

    def __init__(self, root: str):
        self.root = os.path.abspath(os.path.expanduser(root))
        self.requests = collections.Counter()  # not counted on POSIX; kept for a uniform API

    # ---------------------------------------------------------------- naming
    def url(self, key: str = "") -> str:
        return os.path.join(self.root, *key.split("/")) if key else self.root

    def local_path(self, key: str = "") -> str:
        return self.url(key)

    # ---------------------------------------------------------------- safe walking
    def _parts(self, key: str):
        parts = [p for p in key.split("/")] if key else []
        why = unsafe_rel_path(key) if key else ""
        if why:
            raise UnsafePath("%s: refused: the path %r %s" % (self.root, key, why))
        return parts

    def _root_fd(self, create: bool = False):
        """A descriptor of ROOT (which may itself be a link); None if it does not exist
        (created first if CREATE)."""
        if create:
            try:
                os.makedirs(self.root, exist_ok=True)
            except OSError:
                pass  # reported by the open below
        try:
            return os.open(self.root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NONBLOCK | _CLOEXEC)
        except FileNotFoundError:
            if not create:
                return None
            raise RootUnavailable("%s: no such directory" % self.root)
        except NotADirectoryError:
            raise RootUnavailable("%s: not a directory" % self.root)
        except OSError as e:
            raise RootUnavailable("%s: cannot read checkpoint root: %s" % (self.root, e.strerror or e))

    def _refuse(self, fd: int, name: str, where: str, wanted: str):
        """Raise UnsafePath naming what NAME (under FD) really is."""
        why = "never opened: it could block"
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            what = kind_of(st.st_mode)
            if _stat.S_ISLNK(st.st_mode):
                why = "links are never followed under a checkpoint root"
                try:
                    what += " to %r" % os.readlink(name, dir_fd=fd)
                except OSError:
                    pass
        except OSError as e:
            what = "unreadable (%s)" % (e.strerror or e)
        raise UnsafePath("%s: is %s, not %s (%s)" % (where, what, wanted, why))

    def _open_dir(self, parts, create: bool = False):
        """A descriptor of ROOT/parts, a real directory at every level; None if a part is
        missing (and CREATE is false). The caller closes it."""
        fd = self._root_fd(create)
        if fd is None:
            return None
        done = []
        try:
            for part in parts:
                done.append(part)
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        return None
                    try:
                        os.mkdir(part, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass
                    try:
                        nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                    except OSError:
                        self._refuse(fd, part, self.url("/".join(done)), "a directory")
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        self._refuse(fd, part, self.url("/".join(done)), "a directory")
                    raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_file(self, key: str):
        """(fd, fstat) of the regular file KEY, opened read-only, non-blocking, without
        following links; None if absent. The caller closes the fd."""
        parts = self._parts(key)
        d = self._open_dir(parts[:-1])
        if d is None:
            return None
        where = self.url(key)
        try:
            try:
                st = os.stat(parts[-1], dir_fd=d, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if not _stat.S_ISREG(st.st_mode):  # never even open a FIFO or a device
                self._refuse(d, parts[-1], where, "a regular file")
            try:
                fd = os.open(parts[-1], _READ_FLAGS, dir_fd=d)
            except FileNotFoundError:
                return None
            except OSError as e:
                if e.errno == errno.ELOOP:
                    self._refuse(d, parts[-1], where, "a regular file")
                raise
            st = os.fstat(fd)
            if not _stat.S_ISREG(st.st_mode):  # swapped between the lstat and the open
                os.close(fd)
                raise UnsafePath("%s: is %s, not a regular file" % (where, kind_of(st.st_mode)))
            return fd, st
        finally:
            os.close(d)

    def _walk(self, fd: int, prefix: str, out: dict, odd: dict, dirs=None, depth: int = 0) -> None:
        """Regular files under FD into OUT {relpath: size}; everything else that is not a
        real directory into ODD {relpath: what it is}. Never follows a link; directories
        nested deeper than MAX_DEPTH are reported in ODD, not entered."""
        if depth > MAX_DEPTH:
            odd[prefix.rstrip("/")] = "a directory nested more than %d levels deep" % MAX_DEPTH
            return
        with os.scandir(fd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            rel = prefix + e.name
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if _stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(e.name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    odd[rel] = "a directory that cannot be opened"
                    continue
                try:
                    if dirs is not None:
                        dirs.append((rel, sub))
                    self._walk(sub, rel + "/", out, odd, dirs, depth + 1)
                finally:
                    if dirs is None:
                        os.close(sub)
            elif _stat.S_ISREG(st.st_mode):
                out[rel] = st.st_size
            else:
                odd[rel] = kind_of(st.st_mode)

    # ---------------------------------------------------------------- root
    def check_root(self, create: bool = False) -> None:
        """Raise RootUnavailable unless ROOT is a readable directory (created if asked)."""
        if create:
            try:
                os.makedirs(self.root, exist_ok=True)
            except FileExistsError:
                raise RootUnavailable("%s: exists and is not a directory" % self.root)
            except OSError as e:
                raise RootUnavailable("%s: cannot create checkpoint root: %s" % (self.root, e.strerror or e))
        try:
            st = os.stat(self.root)
        except FileNotFoundError:
            raise RootUnavailable("%s: no such directory" % self.root)
        except OSError as e:
            raise RootUnavailable("%s: cannot read checkpoint root: %s" % (self.root, e.strerror or e))
        if not _stat.S_ISDIR(st.st_mode):
            raise RootUnavailable("%s: not a directory" % self.root)
        try:
            with os.scandir(self.root):
                pass
        except OSError as e:
            raise RootUnavailable("%s: cannot read checkpoint root: %s" % (self.root, e.strerror or e))

    # ---------------------------------------------------------------- listing
    def list_top(self):
        """(dir names, {file name: size}, {other name: what it is}) one level under ROOT.
        Symbolic links (to anything) and special files land in the third: never followed."""
        dirs, files, odd = [], {}, {}
        try:
            it = os.scandir(self.root)
        except FileNotFoundError:
            raise RootUnavailable("%s: no such directory" % self.root)
        except NotADirectoryError:
            raise RootUnavailable("%s: not a directory" % self.root)
        except OSError as e:
            raise RootUnavailable("%s: cannot read checkpoint root: %s" % (self.root, e.strerror or e))
        with it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if _stat.S_ISDIR(st.st_mode):
                    dirs.append(e.name)
                elif _stat.S_ISREG(st.st_mode):
                    files[e.name] = st.st_size
                else:
                    what = kind_of(st.st_mode)
                    if _stat.S_ISLNK(st.st_mode):
                        try:
                            what += " to %r" % os.readlink(e.path)
                        except OSError:
                            pass
                    odd[e.name] = what
        return dirs, files, odd

    def list_tree(self, rel: str, odd=None) -> dict:
        """{path relative to ROOT/rel: size} of every regular file under ROOT/rel. Anything
        else (links, FIFOs, devices) goes into ODD {path: what it is} if given. Raises
        UnsafePath if ROOT/rel itself is not a real directory."""
        fd = self._open_dir(self._parts(rel))
        if fd is None:
            return {}
        out = {}
        try:
            self._walk(fd, "", out, odd if odd is not None else {})
        finally:
            os.close(fd)
        return out

    def file_sizes(self, rel: str, paths) -> dict:
        """{path: size} for regular files; None if missing; a string saying what the path
        is when it is not a regular file (a link is never followed)."""
        out = {}
        base = self._parts(rel)
        dirs = {}
        try:
            for p in paths:
                parts = p.split("/")
                parent = "/".join(parts[:-1])
                try:
                    if parent not in dirs:
                        dirs[parent] = self._open_dir(base + (parts[:-1] if parent else []))
                    d = dirs[parent]
                    if d is None:
                        out[p] = None
                        continue
                    st = os.stat(parts[-1], dir_fd=d, follow_symlinks=False)
                    out[p] = st.st_size if _stat.S_ISREG(st.st_mode) else kind_of(st.st_mode)
                except UnsafePath as e:
                    out[p] = str(e)
                except OSError:
                    out[p] = None
        finally:
            for d in dirs.values():
                if d is not None:
                    os.close(d)
        return out

    def exists_dir(self, rel: str) -> bool:
        try:
            fd = self._open_dir(self._parts(rel))
        except (UnsafePath, OSError):
            return False
        if fd is None:
            return False
        os.close(fd)
        return True

    # ---------------------------------------------------------------- reading
    def read(self, key: str, limit: int = MAX_MANIFEST_BYTES):
        """(bytes, token) or (None, None) if absent. The token is the sha256 of the bytes.
        UnsafePath if KEY is not a regular file or is larger than LIMIT bytes."""
        try:
            got = self._open_file(key)
        except OSError as e:
            raise _ioerror(self.url(key), e, "cannot read")
        if got is None:
            return None, None
        fd, st = got
        try:
            if limit is not None and st.st_size > limit:
                raise UnsafePath("%s: %d bytes, larger than the %d bytes a manifest or marker may have"
                                 % (self.url(key), st.st_size, limit))
            chunks, n = [], 0
            while True:
                b = os.read(fd, _CHUNK)
                if not b:
                    break
                chunks.append(b)
                n += len(b)
                if limit is not None and n > limit:
                    raise UnsafePath("%s: grew past the %d bytes a manifest or marker may have"
                                     % (self.url(key), limit))
            data = b"".join(chunks)
        except OSError as e:
            raise _ioerror(self.url(key), e, "cannot read")
        finally:
            os.close(fd)
        return data, hashlib.sha256(data).hexdigest()

    def sha256(self, key: str) -> str:
        got = self._open_file(key)
        if got is None:
            raise CheckpointError("%s: missing" % self.url(key))
        fd, _ = got
        h = hashlib.sha256()
        with os.fdopen(fd, "rb") as f:
            for b in iter(lambda: f.read(_CHUNK), b""):
                h.update(b)
        return h.hexdigest()

    # ---------------------------------------------------------------- writing
    def ensure_dir(self, rel: str) -> str:
        try:
            fd = self._open_dir(self._parts(rel), create=True)
        except OSError as e:
            raise _ioerror(self.url(rel), e, "cannot create")
        os.close(fd)
        return self.url(rel)

    def _durable_tmp(self, key: str, data: bytes):
        """(parent fd, temp name, final name): DATA written and fsynced to a new temp file
        beside KEY. The caller closes the fd."""
        parts = self._parts(key)
        d = self._open_dir(parts[:-1], create=True)
        base = parts[-1]
        tmp = "." + base + ".tmp-" + os.urandom(6).hex()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644, dir_fd=d)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=d)
                except OSError:
                    pass
                raise
        except BaseException:
            os.close(d)
            raise
        return d, tmp, base

    def put_if_absent(self, key: str, data: bytes) -> None:
        """Create KEY with DATA, atomically and durably; Conflict if it exists."""
        final = self.url(key)
        try:
            d, tmp, base = self._durable_tmp(key, data)
        except OSError as e:
            raise _ioerror(final, e)
        try:
            try:
                os.link(tmp, base, src_dir_fd=d, dst_dir_fd=d, follow_symlinks=False)
            except FileExistsError:
                raise Conflict("%s: already exists" % final)
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                    raise
                # No hard links on this file system: O_EXCL create, then write. Not atomic
                # for readers (a crash mid-write leaves a short file that fails to parse,
                # which discovery reports as malformed and never resumes from).
                try:
                    fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644,
                                 dir_fd=d)
                except FileExistsError:
                    raise Conflict("%s: already exists" % final)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            _fsync_fd(d)
        except OSError as e:
            raise _ioerror(final, e)
        finally:
            try:
                os.unlink(tmp, dir_fd=d)
            except OSError:
                pass
            os.close(d)

    def put_if_match(self, key: str, data: bytes, token):
        """Replace KEY if its current token is TOKEN (None: KEY must not exist).
        Returns the new token."""
        import fcntl

        final = self.url(key)
        parts = self._parts(key)
        try:
            d = self._open_dir(parts[:-1], create=True)
        except OSError as e:
            raise _ioerror(final, e)
        try:
            try:
                lk = os.open(parts[-1] + ".lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND | _NOFOLLOW | _NONBLOCK
                             | _CLOEXEC, 0o644, dir_fd=d)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENXIO):
                    self._refuse(d, parts[-1] + ".lock", final + ".lock", "a regular file")
                raise _ioerror(final + ".lock", e)
            try:
                if not _stat.S_ISREG(os.fstat(lk).st_mode):
                    raise UnsafePath("%s.lock: is %s, not a regular file" % (final, kind_of(os.fstat(lk).st_mode)))
                fcntl.flock(lk, fcntl.LOCK_EX)
                try:
                    cur = self.read(key)[1]
                    if cur != token:
                        raise Conflict("%s: changed meanwhile (compare-and-swap lost)" % final)
                    try:
                        d2, tmp, base = self._durable_tmp(key, data)
                        try:
                            os.replace(tmp, base, src_dir_fd=d2, dst_dir_fd=d2)
                            _fsync_fd(d2)
                        finally:
                            os.close(d2)
                    except OSError as e:
                        raise _ioerror(final, e)
                finally:
                    fcntl.flock(lk, fcntl.LOCK_UN)
            finally:
                os.close(lk)
        finally:
            os.close(d)
        return hashlib.sha256(data).hexdigest()

    def put(self, key: str, data: bytes) -> None:
        """Overwrite KEY atomically (temp file + rename). For advisory files only."""
        try:
            d, tmp, base = self._durable_tmp(key, data)
        except OSError as e:
            raise _ioerror(self.url(key), e)
        try:
            os.replace(tmp, base, src_dir_fd=d, dst_dir_fd=d)
        except OSError as e:
            try:
                os.unlink(tmp, dir_fd=d)
            except OSError:
                pass
            raise _ioerror(self.url(key), e)
        finally:
            os.close(d)

    def fsync_tree(self, rel: str) -> None:
        """fsync every file and directory under ROOT/rel, so the data is durable before
        COMMIT.json is. Links and special files are skipped, never opened."""
        parts = self._parts(rel)
        fd = self._open_dir(parts)
        if fd is None:
            return
        dirs = [("", fd)]
        files = {}
        try:
            self._walk(fd, "", files, {}, dirs)
            by_dir = {r: f for r, f in dirs}
            for p in files:
                parent, _, name = p.rpartition("/")
                dfd = by_dir[parent]
                try:
                    ffd = os.open(name, _READ_FLAGS, dir_fd=dfd)
                except OSError:
                    continue
                try:
                    os.fsync(ffd)
                except OSError:
                    pass
                finally:
                    os.close(ffd)
            for _r, dfd in reversed(dirs):
                _fsync_fd(dfd)
        finally:
            for _r, dfd in dirs:
                os.close(dfd)
        pfd = self._open_dir(parts[:-1])
        if pfd is not None:
            _fsync_fd(pfd)
            os.close(pfd)

    def move(self, src_rel: str, dst_rel: str) -> None:
        """Rename the real directory ROOT/src_rel to ROOT/dst_rel (parents created, never
        through a link: a symlinked ``.quarantine`` raises UnsafePath)."""
        sp, dp = self._parts(src_rel), self._parts(dst_rel)
        src, dst = self.url(src_rel), self.url(dst_rel)
        sd = self._open_dir(sp[:-1])
        if sd is None:
            raise CheckpointError("%s: missing" % src)
        try:
            try:
                st = os.stat(sp[-1], dir_fd=sd, follow_symlinks=False)
            except FileNotFoundError:
                raise CheckpointError("%s: missing" % src)
            if not _stat.S_ISDIR(st.st_mode):
                self._refuse(sd, sp[-1], src, "a directory")
            dd = self._open_dir(dp[:-1], create=True)
            try:
                try:
                    os.stat(dp[-1], dir_fd=dd, follow_symlinks=False)
                    raise Conflict("%s: already exists" % dst)
                except FileNotFoundError:
                    pass
                os.rename(sp[-1], dp[-1], src_dir_fd=sd, dst_dir_fd=dd)
                _fsync_fd(dd)
                _fsync_fd(sd)
            finally:
                os.close(dd)
        finally:
            os.close(sd)

    @staticmethod
    def _rmtree_at(parent: int, name: str) -> None:
        """Remove the real directory NAME under PARENT and everything in it, through
        descriptors: a link inside is removed, never followed."""
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        try:
            with os.scandir(fd) as it:
                entries = list(it)
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    LocalStore._rmtree_at(fd, e.name)
                else:
                    os.unlink(e.name, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=parent)

    def delete_tree(self, rel: str, first=()) -> None:
        """Delete the real directory ROOT/rel (UnsafePath if it is a link). The keys in
        FIRST go first (COMMIT.json: a half-deleted checkpoint is then torn, never
        committed-with-missing-files)."""
        parts = self._parts(rel)
        pd = self._open_dir(parts[:-1])
        if pd is None:
            return
        try:
            try:
                st = os.stat(parts[-1], dir_fd=pd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if not _stat.S_ISDIR(st.st_mode):
                self._refuse(pd, parts[-1], self.url(rel), "a directory")
            fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=pd)
            try:
                for k in first:
                    try:
                        os.unlink(k, dir_fd=fd)
                    except FileNotFoundError:
                        pass
                _fsync_fd(fd)
            finally:
                os.close(fd)
            self._rmtree_at(pd, parts[-1])
        finally:
            os.close(pd)

    def download_files(self, rel: str, paths, dest: str) -> None:  # pragma: no cover - POSIX reads in place
        raise CheckpointError("download_files is for S3 roots; POSIX checkpoints are read in place")


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


class S3Store:
    """ROOT is ``s3://bucket/prefix``."""

    is_local = False

    def __init__(self, bucket: str, prefix: str = "", client=None):
        self.bucket = bucket
        prefix = prefix.strip("/")
        self.prefix = prefix + "/" if prefix else ""
        self.root = "s3://%s/%s" % (bucket, prefix) if prefix else "s3://%s" % bucket
        self.requests = collections.Counter()
        self._lock = threading.Lock()
        self._client = client
        self._tree_cache = None  # {key relative to ROOT: size} after prefetch_all()

    # ---------------------------------------------------------------- client
    @property
    def s3(self):
        if self._client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise RootUnavailable("%s: boto3 is needed for S3 checkpoint roots (pip install boto3)"
                                      % self.root)
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
            self._client = boto3.session.Session().client(
                "s3", endpoint_url=endpoint,
                config=Config(retries={"max_attempts": 4, "mode": "standard"}, max_pool_connections=32))
        if not getattr(self, "_counting", False):
            self._client.meta.events.register("before-call.s3", self._count)
            self._counting = True
        return self._client

    def _count(self, model=None, **_kw):
        with self._lock:  # scan() reads on several threads
            self.requests[getattr(model, "name", "?")] += 1

    def _key(self, key: str) -> str:
        return self.prefix + key

    def url(self, key: str = "") -> str:
        return "s3://%s/%s" % (self.bucket, self._key(key)) if key else self.root

    @staticmethod
    def _code(e) -> str:
        return str(e.response.get("Error", {}).get("Code", ""))

    @staticmethod
    def _status(e) -> int:
        return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)

    def _call(self, op: str, where: str, **kw):
        """Call S3 and turn the errors a user can act on into RootUnavailable."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.s3, op)(**kw)
        except ClientError as e:
            code = self._code(e)
            if code == "NoSuchBucket":
                raise RootUnavailable("s3://%s: bucket does not exist" % self.bucket)
            if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                raise RootUnavailable("%s: access denied (%s)" % (where, code))
            raise
        except BotoCoreError as e:
            raise RootUnavailable("%s: %s" % (where, e))

    # ---------------------------------------------------------------- root
    def check_root(self, create: bool = False) -> None:
        """S3 has no directories: only the bucket must exist (never created here)."""
        from botocore.exceptions import ClientError

        try:
            self._call("head_bucket", self.root, Bucket=self.bucket)
        except ClientError as e:
            if self._code(e) in ("404", "NoSuchBucket", "NotFound"):
                raise RootUnavailable("s3://%s: bucket does not exist" % self.bucket)
            if self._status(e) == 403:
                raise RootUnavailable("s3://%s: access denied" % self.bucket)
            raise

    # ---------------------------------------------------------------- listing
    def _paginate(self, prefix: str, delimiter: bool):
        kw = {"Bucket": self.bucket, "Prefix": prefix}
        if delimiter:
            kw["Delimiter"] = "/"
        while True:
            r = self._call("list_objects_v2", self.url(prefix[len(self.prefix):]), **kw)
            yield r
            if not r.get("IsTruncated"):
                return
            kw["ContinuationToken"] = r["NextContinuationToken"]

    def list_top(self):
        """(dir names, {file name: size}, {}): S3 has no links or special files."""
        dirs, files = [], {}
        n = len(self.prefix)
        for r in self._paginate(self.prefix, delimiter=True):
            for c in r.get("CommonPrefixes", ()):
                dirs.append(c["Prefix"][n:].rstrip("/"))
            for o in r.get("Contents", ()):
                files[o["Key"][n:]] = o["Size"]
        return dirs, files, {}

    def prefetch_all(self) -> dict:
        """List every key under ROOT once (paginated) and serve list_tree() from it:
        scanning N checkpoints then costs ~keys/1000 list requests, not N."""
        out = {}
        n = len(self.prefix)
        for r in self._paginate(self.prefix, delimiter=False):
            for o in r.get("Contents", ()):
                out[o["Key"][n:]] = o["Size"]
        self._tree_cache = out
        return out

    def list_tree(self, rel: str, odd=None) -> dict:
        pre = rel.rstrip("/") + "/"
        if self._tree_cache is not None:
            return {k[len(pre):]: v for k, v in self._tree_cache.items() if k.startswith(pre)}
        out = {}
        full = self._key(pre)
        for r in self._paginate(full, delimiter=False):
            for o in r.get("Contents", ()):
                out[o["Key"][len(full):]] = o["Size"]
        return out

    def file_sizes(self, rel: str, paths) -> dict:
        tree = self.list_tree(rel)
        return {p: tree.get(p) for p in paths}

    def exists_dir(self, rel: str) -> bool:
        full = self._key(rel.rstrip("/") + "/")
        r = self._call("list_objects_v2", self.url(rel), Bucket=self.bucket, Prefix=full, MaxKeys=1)
        return bool(r.get("KeyCount") or r.get("Contents"))

    # ---------------------------------------------------------------- reading
    def read(self, key: str, limit: int = MAX_MANIFEST_BYTES):
        """(bytes, ETag) or (None, None) if absent; UnsafePath above LIMIT bytes."""
        from botocore.exceptions import ClientError

        try:
            r = self._call("get_object", self.url(key), Bucket=self.bucket, Key=self._key(key))
        except ClientError as e:
            if self._code(e) in ("404", "NoSuchKey", "NotFound"):
                return None, None
            raise CheckpointError("%s: cannot read: %s" % (self.url(key), e))
        body = r["Body"]
        try:
            if limit is not None and int(r.get("ContentLength") or 0) > limit:
                raise UnsafePath("%s: %d bytes, larger than the %d bytes a manifest or marker may have"
                                 % (self.url(key), r["ContentLength"], limit))
            data = body.read(limit + 1) if limit is not None else body.read()
        finally:
            body.close()
        if limit is not None and len(data) > limit:
            raise UnsafePath("%s: larger than the %d bytes a manifest or marker may have" % (self.url(key), limit))
        return data, r["ETag"]

    def sha256(self, key: str) -> str:
        h = hashlib.sha256()
        body = self._call("get_object", self.url(key), Bucket=self.bucket, Key=self._key(key))["Body"]
        for b in iter(lambda: body.read(_CHUNK), b""):
            h.update(b)
        return h.hexdigest()

    # ---------------------------------------------------------------- writing
    def ensure_dir(self, rel: str) -> str:  # S3 has no directories
        return self.url(rel)

    def _conditional_put(self, key: str, data: bytes, **cond):
        from botocore.exceptions import ClientError

        try:
            return self._call("put_object", self.url(key), Bucket=self.bucket, Key=self._key(key), Body=data, **cond)
        except ClientError as e:
            code = self._code(e)
            if self._status(e) in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise Conflict("%s: precondition failed (%s)" % (self.url(key), code or self._status(e)))
            if "IfMatch" in cond and code in ("NoSuchKey", "404", "NotFound"):
                raise Conflict("%s: deleted meanwhile (compare-and-swap lost)" % self.url(key))
            raise

    def put_if_absent(self, key: str, data: bytes) -> None:
        self._conditional_put(key, data, IfNoneMatch="*")

    def put_if_match(self, key: str, data: bytes, token):
        """Replace KEY if its ETag is TOKEN (None: KEY must not exist). Returns the new ETag."""
        if token is None:
            r = self._conditional_put(key, data, IfNoneMatch="*")
        else:
            r = self._conditional_put(key, data, IfMatch=token)
        return r.get("ETag")

    def put(self, key: str, data: bytes) -> None:
        self._call("put_object", self.url(key), Bucket=self.bucket, Key=self._key(key), Body=data)

    def fsync_tree(self, rel: str) -> None:  # S3 objects are durable once PUT returns
        return None

    def upload_tree(self, local_dir: str, rel: str) -> dict:
        """Upload every file under LOCAL_DIR to ROOT/rel/ (multipart above 64 MiB).
        Returns {relative path: size}."""
        from boto3.s3.transfer import TransferConfig

        cfg = TransferConfig(multipart_threshold=int(os.environ.get("LAUNCHER_S3_MULTIPART_THRESHOLD",
                                                                    64 << 20)),
                             multipart_chunksize=int(os.environ.get("LAUNCHER_S3_MULTIPART_CHUNKSIZE",
                                                                    64 << 20)))
        out = {}
        for relp, p in local_files(local_dir):
            key = self._key(rel.rstrip("/") + "/" + relp)
            try:
                self.s3.upload_file(p, self.bucket, key, Config=cfg)
            except Exception as e:  # boto3 wraps ClientError in S3UploadFailedError
                if "NoSuchBucket" in str(e):
                    raise RootUnavailable("s3://%s: bucket does not exist" % self.bucket)
                raise
            self.requests["upload_file"] += 1
            out[relp] = os.path.getsize(p)
        return out

    def download_files(self, rel: str, paths, dest: str) -> None:
        """Download exactly ROOT/rel/<p> for every p in PATHS into DEST/<p>. Every path must
        be a plain relative path (``unsafe_rel_path``) and every target must resolve inside
        DEST: a key planted with '..' or an absolute name raises UnsafePath, and keys not in
        PATHS are never fetched."""
        for relp in paths:
            p = safe_join(dest, relp)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            safe_join(dest, relp)  # re-check now that the parents exist
            self.s3.download_file(self.bucket, self._key(rel.rstrip("/") + "/" + relp), p)
            self.requests["download_file"] += 1

    def _keys_under(self, rel: str):
        full = self._key(rel.rstrip("/") + "/")
        keys = []
        for r in self._paginate(full, delimiter=False):
            keys += [o["Key"] for o in r.get("Contents", ())]
        return keys

    def _delete_keys(self, keys) -> None:
        keys = list(keys)
        for i in range(0, len(keys), 1000):
            batch = keys[i:i + 1000]
            r = self._call("delete_objects", self.root, Bucket=self.bucket,
                           Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
            errs = r.get("Errors") or []
            if errs:
                raise CheckpointError("s3://%s/%s: delete failed: %s" % (self.bucket, errs[0].get("Key"),
                                                                           errs[0].get("Message")))

    def move(self, src_rel: str, dst_rel: str) -> None:
        """Copy every object under src to dst, then delete the originals (S3 has no rename)."""
        src_keys = self._keys_under(src_rel)
        if self.exists_dir(dst_rel):
            raise Conflict("%s: already exists" % self.url(dst_rel))
        src_full = self._key(src_rel.rstrip("/") + "/")
        dst_full = self._key(dst_rel.rstrip("/") + "/")
        for k in src_keys:
            self.s3.copy({"Bucket": self.bucket, "Key": k}, self.bucket, dst_full + k[len(src_full):])
            self.requests["copy"] += 1
        self._delete_keys(src_keys)

    def delete_tree(self, rel: str, first=()) -> None:
        base = rel.rstrip("/") + "/"
        firsts = [self._key(base + k) for k in first]
        if firsts:
            self._delete_keys(firsts)
        self._delete_keys([k for k in self._keys_under(rel) if k not in firsts])
