"""Storage under a checkpoint ROOT: a POSIX directory, or ``s3://bucket/prefix``.

Stdlib only; boto3 is imported lazily and only for S3 roots. Keys are '/'-separated
paths relative to ROOT. Both stores offer the same small set of operations the
contract needs:

- ``list_top()``: the names one level under ROOT (directories, and files with sizes).
  S3: ListObjectsV2 with ``Delimiter='/'``, paginated: one request per 1,000 names,
  never one per object.
- ``file_sizes(dir, paths)``: sizes of the files a manifest lists (POSIX: one stat
  each; S3: one paginated listing of the checkpoint's prefix).
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
import shutil
import stat as _stat
import tempfile
import threading

from .errors import CheckpointError, Conflict, RootUnavailable

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


class LocalStore:
    """ROOT is a directory on a POSIX file system (local or shared: NFS, Lustre, GPFS)."""

    is_local = True

    def __init__(self, root: str):
        self.root = os.path.abspath(os.path.expanduser(root))
        self.requests = collections.Counter()  # not counted on POSIX; kept for a uniform API

    # ---------------------------------------------------------------- naming
    def url(self, key: str = "") -> str:
        return os.path.join(self.root, *key.split("/")) if key else self.root

    def local_path(self, key: str = "") -> str:
        return self.url(key)

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
        """(dir names, {file name: size}) one level under ROOT."""
        dirs, files = [], {}
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
                    if e.is_dir(follow_symlinks=True):
                        dirs.append(e.name)
                    elif e.is_file(follow_symlinks=True):
                        files[e.name] = e.stat().st_size
                except OSError:
                    continue
        return dirs, files

    def list_tree(self, rel: str) -> dict:
        """{path relative to ROOT/rel: size} of every regular file under ROOT/rel."""
        base = self.url(rel)
        out = {}
        for dirpath, dirnames, filenames in os.walk(base, onerror=None):
            dirnames.sort()
            for f in filenames:
                p = os.path.join(dirpath, f)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                if _stat.S_ISREG(st.st_mode):
                    out[os.path.relpath(p, base).replace(os.sep, "/")] = st.st_size
        return out

    def file_sizes(self, rel: str, paths) -> dict:
        out = {}
        for p in paths:
            try:
                st = os.stat(self.url(rel + "/" + p))
                out[p] = st.st_size if _stat.S_ISREG(st.st_mode) else None
            except OSError:
                out[p] = None
        return out

    def exists_dir(self, rel: str) -> bool:
        return os.path.isdir(self.url(rel))

    # ---------------------------------------------------------------- reading
    def read(self, key: str):
        """(bytes, token) or (None, None) if absent. The token is the sha256 of the bytes."""
        p = self.url(key)
        try:
            with open(p, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None, None
        except OSError as e:
            raise CheckpointError("%s: cannot read: %s" % (p, e.strerror or e))
        return data, hashlib.sha256(data).hexdigest()

    def sha256(self, key: str) -> str:
        h = hashlib.sha256()
        with open(self.url(key), "rb") as f:
            for b in iter(lambda: f.read(_CHUNK), b""):
                h.update(b)
        return h.hexdigest()

    # ---------------------------------------------------------------- writing
    def ensure_dir(self, rel: str) -> str:
        p = self.url(rel)
        os.makedirs(p, exist_ok=True)
        return p

    def _durable_tmp(self, key: str, data: bytes):
        final = self.url(key)
        d = os.path.dirname(final)
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(final) + ".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return d, tmp, final

    def put_if_absent(self, key: str, data: bytes) -> None:
        """Create KEY with DATA, atomically and durably; Conflict if it exists."""
        d, tmp, final = self._durable_tmp(key, data)
        try:
            try:
                os.link(tmp, final)
            except FileExistsError:
                raise Conflict("%s: already exists" % final)
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                    raise
                # No hard links on this file system: O_EXCL create, then write. Not atomic
                # for readers (a crash mid-write leaves a short file that fails to parse,
                # which discovery reports as malformed and never resumes from).
                try:
                    fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    raise Conflict("%s: already exists" % final)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        _fsync_dir(d)

    def put_if_match(self, key: str, data: bytes, token):
        """Replace KEY if its current token is TOKEN (None: KEY must not exist).
        Returns the new token."""
        import fcntl

        final = self.url(key)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        with open(final + ".lock", "a") as lk:
            fcntl.flock(lk.fileno(), fcntl.LOCK_EX)
            try:
                cur = self.read(key)[1]
                if cur != token:
                    raise Conflict("%s: changed meanwhile (compare-and-swap lost)" % final)
                d, tmp, _ = self._durable_tmp(key, data)
                os.replace(tmp, final)
                _fsync_dir(d)
            finally:
                fcntl.flock(lk.fileno(), fcntl.LOCK_UN)
        return hashlib.sha256(data).hexdigest()

    def put(self, key: str, data: bytes) -> None:
        """Overwrite KEY atomically (temp file + rename). For advisory files only."""
        d, tmp, final = self._durable_tmp(key, data)
        os.replace(tmp, final)

    def fsync_tree(self, rel: str) -> None:
        """fsync every file and directory under ROOT/rel, so the data is durable before
        COMMIT.json is."""
        base = self.url(rel)
        for dirpath, _dirnames, filenames in os.walk(base):
            for f in filenames:
                try:
                    fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.fsync(fd)
                except OSError:
                    pass
                finally:
                    os.close(fd)
            _fsync_dir(dirpath)
        _fsync_dir(os.path.dirname(base))

    def move(self, src_rel: str, dst_rel: str) -> None:
        src, dst = self.url(src_rel), self.url(dst_rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.exists(dst):
            raise Conflict("%s: already exists" % dst)
        os.rename(src, dst)
        _fsync_dir(os.path.dirname(dst))
        _fsync_dir(os.path.dirname(src))

    def delete_tree(self, rel: str, first=()) -> None:
        """Delete ROOT/rel. The keys in FIRST go first (COMMIT.json: a half-deleted
        checkpoint is then torn, never committed-with-missing-files)."""
        base = self.url(rel)
        for k in first:
            try:
                os.unlink(os.path.join(base, k))
            except FileNotFoundError:
                pass
        _fsync_dir(base)
        shutil.rmtree(base)

    def download_tree(self, rel: str, dest: str) -> dict:  # pragma: no cover - POSIX reads in place
        raise CheckpointError("download_tree is for S3 roots; POSIX checkpoints are read in place")


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
        dirs, files = [], {}
        n = len(self.prefix)
        for r in self._paginate(self.prefix, delimiter=True):
            for c in r.get("CommonPrefixes", ()):
                dirs.append(c["Prefix"][n:].rstrip("/"))
            for o in r.get("Contents", ()):
                files[o["Key"][n:]] = o["Size"]
        return dirs, files

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

    def list_tree(self, rel: str) -> dict:
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
    def read(self, key: str):
        from botocore.exceptions import ClientError

        try:
            r = self._call("get_object", self.url(key), Bucket=self.bucket, Key=self._key(key))
        except ClientError as e:
            if self._code(e) in ("404", "NoSuchKey", "NotFound"):
                return None, None
            raise CheckpointError("%s: cannot read: %s" % (self.url(key), e))
        return r["Body"].read(), r["ETag"]

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
        for dirpath, dirnames, filenames in os.walk(local_dir):
            dirnames.sort()
            for f in sorted(filenames):
                p = os.path.join(dirpath, f)
                relp = os.path.relpath(p, local_dir).replace(os.sep, "/")
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

    def download_tree(self, rel: str, dest: str) -> dict:
        tree = self.list_tree(rel)
        for relp in tree:
            p = os.path.join(dest, *relp.split("/"))
            os.makedirs(os.path.dirname(p), exist_ok=True)
            self.s3.download_file(self.bucket, self._key(rel.rstrip("/") + "/" + relp), p)
            self.requests["download_file"] += 1
        return tree

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
