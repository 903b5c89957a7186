"""The job-side helper as bytes, ready to stage next to a job script."""

from __future__ import annotations

import functools
import os

HELPER_NAME = "launcher_job.pyz"


@functools.lru_cache(maxsize=8)
def helper_zip_bytes(extensions: tuple = ()) -> bytes:
    """The job-side helper (checkpoint resume, wait-commit, writer API) as a zipapp, with
    the job-side command modules a backend adds (EXTENSIONS, e.g. Slurm's node guard):
    compute nodes run it with plain python3, whether or not launcher is installed there,
    and programs import ``launcher.jobside`` from it via LAUNCHER_JOB_PYZ."""
    import tempfile

    from .jobside.zipapp import stage_zip

    with tempfile.TemporaryDirectory() as d:
        with open(stage_zip(os.path.join(d, HELPER_NAME), tuple(extensions)), "rb") as f:
            return f.read()
