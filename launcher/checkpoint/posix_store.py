"""A checkpoint ROOT on a POSIX file system (local or shared: NFS, Lustre, GPFS): the write
half (create-only, compare-and-swap, atomic put, fsync, move, delete), on top of
``PosixReads``. Nothing below ROOT is ever followed (see ``PosixReads``)."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat as _stat

from launcher.checkpoint.errors import CheckpointError, Conflict, UnsafePath
from launcher.checkpoint.posix_io import (_CLOEXEC, _DIR_FLAGS, _NOFOLLOW, _NONBLOCK, _READ_FLAGS, _fsync_fd, _ioerror,
                                          kind_of)
from launcher.checkpoint.posix_read import PosixReads


class LocalStore(PosixReads):
    """ROOT is a directory on a POSIX file system; see ``PosixReads`` for the safety rules."""

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

    def upload_file(self, local_path: str, key: str) -> int:
        """Copy the local regular file LOCAL_PATH to KEY (temp file + fsync + rename: a reader
        sees the old file or the whole new one). Returns its size."""
        with open(local_path, "rb") as f:
            data_fd = f.fileno()
            parts = self._parts(key)
            final = self.url(key)
            try:
                d = self._open_dir(parts[:-1], create=True)
            except OSError as e:
                raise _ioerror(final, e)
            tmp = "." + parts[-1] + ".tmp-" + os.urandom(6).hex()
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644, dir_fd=d)
                try:
                    with os.fdopen(fd, "wb") as g:
                        while True:
                            b = os.read(data_fd, 1 << 20)
                            if not b:
                                break
                            g.write(b)
                        g.flush()
                        os.fsync(g.fileno())
                        size = g.tell()
                    os.replace(tmp, parts[-1], src_dir_fd=d, dst_dir_fd=d)
                    _fsync_fd(d)
                except BaseException:
                    try:
                        os.unlink(tmp, dir_fd=d)
                    except OSError:
                        pass
                    raise
            except OSError as e:
                raise _ioerror(final, e)
            finally:
                os.close(d)
        return size

    def download_files(self, rel: str, paths, dest: str) -> None:  # pragma: no cover - POSIX reads in place
        raise CheckpointError("download_files is for S3 roots; POSIX checkpoints are read in place")
