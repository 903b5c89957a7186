"""A checkpoint ROOT on S3 (``s3://bucket/prefix``): the same operations as ``LocalStore``
with conditional PUTs. boto3 is imported lazily, on first use (``s3_client.aws_sdk``)."""

from __future__ import annotations

import collections
import hashlib
import os
import threading

from launcher.checkpoint.contract import MAX_MANIFEST_BYTES
from launcher.checkpoint.errors import CheckpointError, Conflict, RootUnavailable, UnsafePath
from launcher.checkpoint.posix_io import _CHUNK, local_files, safe_join
from launcher.checkpoint.s3_client import aws_sdk, make_s3_client, s3_endpoint, unanswered, unanswered_message


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
    def _no_boto3(self) -> RootUnavailable:
        return RootUnavailable("%s: boto3 is needed for S3 checkpoint roots, on this machine and on the "
                               "nodes that run the job (pip install boto3)" % self.root)

    def _errors(self):
        """botocore's exceptions module; without boto3 (a node with no SDK) the one-line
        RootUnavailable of ``s3``, never a raw ModuleNotFoundError."""
        try:
            _, botocore = aws_sdk()
        except ImportError:
            raise self._no_boto3() from None
        return botocore.exceptions

    def _transfer_config(self):
        """boto3's TransferConfig for uploads: multipart above $LAUNCHER_S3_MULTIPART_THRESHOLD, in
        parts of $LAUNCHER_S3_MULTIPART_CHUNKSIZE (64 MiB each by default). RootUnavailable without boto3."""
        try:
            boto3, _ = aws_sdk()
        except ImportError:
            raise self._no_boto3() from None
        return boto3.s3.transfer.TransferConfig(
            multipart_threshold=int(os.environ.get("LAUNCHER_S3_MULTIPART_THRESHOLD", 64 << 20)),
            multipart_chunksize=int(os.environ.get("LAUNCHER_S3_MULTIPART_CHUNKSIZE", 64 << 20)))

    @property
    def s3(self):
        if self._client is None:
            try:
                self._client = make_s3_client()  # bounded timeouts and retries (s3_client)
            except ImportError:
                raise self._no_boto3() from None
        if not getattr(self, "_counting", False):
            self._client.meta.events.register("before-call.s3", self._count)
            self._counting = True
        return self._client

    def _unanswered(self, e: BaseException):
        """RootUnavailable (one line naming ROOT, the endpoint and what to do) if E means the
        endpoint could not be reached or did not answer in time, else None."""
        found = unanswered(e)
        if found is None:
            return None
        endpoint = getattr(getattr(self._client, "meta", None), "endpoint_url", None) or s3_endpoint()
        return RootUnavailable(unanswered_message(self.root, endpoint, found))

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
        errors = self._errors()
        BotoCoreError, ClientError = errors.BotoCoreError, errors.ClientError

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
            raise self._unanswered(e) or RootUnavailable("%s: %s" % (where, e)) from None

    def _transfer(self, op: str, *args, **kw):
        """A managed transfer or body read (not an API call ``_call`` wraps): an endpoint that
        does not answer is RootUnavailable, as there."""
        try:
            return op(*args, **kw)
        except Exception as e:  # noqa: BLE001 - re-raised unless it is an unanswered endpoint
            gone = self._unanswered(e)
            if gone is not None:
                raise gone from None
            raise

    # ---------------------------------------------------------------- root
    def check_root(self, create: bool = False) -> None:
        """S3 has no directories: only the bucket must exist (never created here)."""
        ClientError = self._errors().ClientError

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
        ClientError = self._errors().ClientError

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
            data = self._transfer(body.read, limit + 1) if limit is not None else self._transfer(body.read)
        finally:
            body.close()
        if limit is not None and len(data) > limit:
            raise UnsafePath("%s: larger than the %d bytes a manifest or marker may have" % (self.url(key), limit))
        return data, r["ETag"]

    def sha256(self, key: str) -> str:
        h = hashlib.sha256()
        body = self._call("get_object", self.url(key), Bucket=self.bucket, Key=self._key(key))["Body"]
        for b in iter(lambda: self._transfer(body.read, _CHUNK), b""):
            h.update(b)
        return h.hexdigest()

    # ---------------------------------------------------------------- writing
    def ensure_dir(self, rel: str) -> str:  # S3 has no directories
        return self.url(rel)

    def _conditional_put(self, key: str, data: bytes, **cond):
        ClientError = self._errors().ClientError

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
        cfg = self._transfer_config()
        out = {}
        for relp, p in local_files(local_dir):
            key = self._key(rel.rstrip("/") + "/" + relp)
            try:
                self._transfer(self.s3.upload_file, p, self.bucket, key, Config=cfg)
            except Exception as e:  # boto3 wraps ClientError in S3UploadFailedError
                if "NoSuchBucket" in str(e):
                    raise RootUnavailable("s3://%s: bucket does not exist" % self.bucket)
                raise
            self.requests["upload_file"] += 1
            out[relp] = os.path.getsize(p)
        return out

    def upload_file(self, local_path: str, key: str) -> int:
        """Upload one local file to KEY (multipart above the threshold: invisible until
        complete). Returns its size."""
        cfg = self._transfer_config()
        try:
            try:
                self.s3.upload_file(local_path, self.bucket, self._key(key), Config=cfg)
            except RuntimeError as e:
                # at interpreter exit (the drainer's final drain runs from atexit) no thread
                # pool takes new work: upload on this thread instead
                if "after interpreter shutdown" not in str(e):
                    raise
                cfg.use_threads = False
                self.s3.upload_file(local_path, self.bucket, self._key(key), Config=cfg)
        except Exception as e:  # boto3 wraps ClientError in S3UploadFailedError
            if "NoSuchBucket" in str(e):
                raise RootUnavailable("s3://%s: bucket does not exist" % self.bucket)
            raise
        self.requests["upload_file"] += 1
        return os.path.getsize(local_path)

    def download_files(self, rel: str, paths, dest: str) -> None:
        """Download exactly ROOT/rel/<p> for every p in PATHS into DEST/<p>. Every path must
        be a plain relative path (``unsafe_rel_path``) and every target must resolve inside
        DEST: a key planted with '..' or an absolute name raises UnsafePath, and keys not in
        PATHS are never fetched."""
        for relp in paths:
            p = safe_join(dest, relp)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            safe_join(dest, relp)  # re-check now that the parents exist
            self._transfer(self.s3.download_file, self.bucket, self._key(rel.rstrip("/") + "/" + relp), p)
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
            self._transfer(self.s3.copy, {"Bucket": self.bucket, "Key": k}, self.bucket, dst_full + k[len(src_full):])
            self.requests["copy"] += 1
        self._delete_keys(src_keys)

    def delete_tree(self, rel: str, first=()) -> None:
        base = rel.rstrip("/") + "/"
        firsts = [self._key(base + k) for k in first]
        if firsts:
            self._delete_keys(firsts)
        self._delete_keys([k for k in self._keys_under(rel) if k not in firsts])
