"""Names SkyPilot sees, derived from the dedupe token (job id + attempt).

``launcher:<job>:<attempt>`` is not a valid SkyPilot name (no ':'), so the task is
named ``launcher.<job>.<attempt>`` and the cluster ``<prefix>-<job>-<attempt>``.
Both are pure functions of the JobRef: a launcher restarted mid-submit computes the
same names and finds the cluster or managed job instead of launching a second one.
"""

from __future__ import annotations

import re
import zlib

_UNSAFE = re.compile(r"[^A-Za-z0-9]+")


def safe_job_id(job_id: str) -> str:
    """The job id in the characters every SkyPilot name allows; a checksum keeps mangled ids distinct."""
    safe = _UNSAFE.sub("-", job_id).strip("-")
    if safe != job_id or not safe:
        safe = f"{safe or 'job'}-{zlib.crc32(job_id.encode()):08x}"
    return safe


def task_name(job_id: str, attempt: int) -> str:
    # Task names: [a-zA-Z0-9]+(?:[._-]{1,2}[a-zA-Z0-9]+)*
    return f"launcher.{safe_job_id(job_id)}.{int(attempt)}"


def cluster_name(prefix: str, job_id: str, attempt: int) -> str:
    # Cluster names: [a-zA-Z]([-_.a-zA-Z0-9]*[a-zA-Z0-9])? ; one cluster per attempt, so a
    # recovery may land on another cloud without colliding with the preempted one.
    return f"{prefix}-{safe_job_id(job_id)}-{int(attempt)}"
