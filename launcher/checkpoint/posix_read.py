"""Reading a checkpoint ROOT on a POSIX file system without ever following a link below it:
the read half of ``LocalStore`` (walking, listing, reading manifests and markers)."""

from __future__ import annotations

import collections
import errno
import hashlib
import os
import stat as _stat

from launcher.checkpoint.contract import MAX_MANIFEST_BYTES, unsafe_rel_path
from launcher.checkpoint.errors import CheckpointError, RootUnavailable, UnsafePath
from launcher.checkpoint.posix_io import (_CHUNK, _CLOEXEC, _DIR_FLAGS, _NONBLOCK, _READ_FLAGS, MAX_DEPTH, _ioerror,
                       kind_of)


class PosixReads:
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
