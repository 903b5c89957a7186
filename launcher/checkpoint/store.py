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
The client, with its bounded timeouts and retries, is made in ``launcher.checkpoint.s3_client``.
Every S3 request is counted in ``S3Store.requests`` (by operation name).
"""

from __future__ import annotations

from launcher.checkpoint.errors import RootUnavailable
from launcher.checkpoint.posix_store import LocalStore
from launcher.checkpoint.s3_store import S3Store

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
