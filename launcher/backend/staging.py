"""The job-side helper as bytes, ready to stage next to a job script."""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile

from launcher.jobside.zipapp import stage_zip

HELPER_NAME = "launcher_job.pyz"


@functools.lru_cache(maxsize=8)
def helper_zip_bytes(extensions: tuple = ()) -> bytes:
    """The job-side helper (checkpoint resume, wait-commit, writer API) as a zipapp, with
    the job-side command modules a backend adds (EXTENSIONS, e.g. Slurm's node guard):
    compute nodes run it with plain python3, whether or not launcher is installed there,
    and programs import ``launcher.jobside`` from it via LAUNCHER_JOB_PYZ."""
    with tempfile.TemporaryDirectory() as d:
        with open(stage_zip(os.path.join(d, HELPER_NAME), tuple(extensions)), "rb") as f:
            return f.read()


SHARED_DIR = ".helpers"


def helper_digest(data: bytes) -> str:
    """DATA's sha256."""
    return hashlib.sha256(data).hexdigest()


def shared_helper_path(jobs_root: str, data: bytes) -> str:
    """Where the helper with DATA's content is kept once for every job under JOBS_ROOT:
    named by its content hash, so a different helper never takes an existing one's place."""
    return os.path.join(jobs_root, SHARED_DIR, f"launcher_job-{helper_digest(data)[:40]}.pyz")


def _holds(path: str, data: bytes) -> bool:
    """Whether PATH holds exactly DATA."""
    try:
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False


def _write_aside(path: str, data: bytes) -> str:
    tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    with open(tmp, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o444)
    return tmp


def ensure_shared_helper(jobs_root: str, data: bytes) -> str:
    """The shared copy of the helper DATA under JOBS_ROOT, written once per content hash:
    written aside and fsynced, then put in place; an existing file is used only when its
    content hash matches (a partial or tampered file is replaced, never reused)."""
    path = shared_helper_path(jobs_root, data)
    if _holds(path, data):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = _write_aside(path, data)
    try:
        try:
            os.link(tmp, path)  # create-only: a concurrent launcher's complete copy is kept
        except FileExistsError:
            if not _holds(path, data):
                os.replace(tmp, path)  # a damaged copy: ours, complete, takes its place
                tmp = None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    if not _holds(path, data):
        raise OSError(f"the shared job-side helper {path} does not hold what was written")
    return path


def stage_helper_locally(job_dir: str, data: bytes) -> str:
    """Put the helper DATA at JOB_DIR/HELPER_NAME as a hard link to the one shared copy
    under JOB_DIR's parent (identical helpers are written once, not once per job); a copy
    where links are not possible. Returns the helper's path in the job dir."""
    dest = os.path.join(job_dir, HELPER_NAME)
    os.makedirs(job_dir, exist_ok=True)
    try:
        shared = ensure_shared_helper(os.path.dirname(os.path.abspath(job_dir)), data)
        try:
            os.link(shared, dest)  # a new job's folder: nothing there yet
        except FileExistsError:  # a further attempt in the same folder: replace what is there
            tmp = f"{dest}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
            os.link(shared, tmp)
            os.replace(tmp, dest)
        return dest
    except OSError:
        pass
    tmp = _write_aside(dest, data)
    os.replace(tmp, dest)
    return dest
