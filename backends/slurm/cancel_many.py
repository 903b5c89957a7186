"""Pure helpers of the Slurm backend's ``cancel_many``: many job ids in one ``scancel`` (split
so that one command line stays far below ARG_MAX, also through an SSH login shell), and what
its error output says about each id."""

from __future__ import annotations

import re
from typing import Iterable

MAX_ARGV_CHARS = 64 * 1024  # per scancel: ~6,000 ids; Linux ARG_MAX is 2 MiB, sshd's limit lower
_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")  # a job, an array (its id), or one array task <array>_<index>
_ERROR = re.compile(r"job id ([0-9_]+)\S*:\s*(.*)$", re.I)
_HARMLESS = ("invalid job id", "already completed", "already completing", "job/step already")


def is_job_id(native: str) -> bool:
    return bool(_ID.match(native or ""))


def id_batches(ids: Iterable[str], max_chars: int = MAX_ARGV_CHARS) -> list[list[str]]:
    """IDS (duplicates dropped, order kept) in batches whose joined length stays under MAX_CHARS."""
    out: list[list[str]] = []
    size = max_chars  # forces a first batch
    for i in dict.fromkeys(ids):
        if size + len(i) + 1 > max_chars:
            out.append([])
            size = len("scancel")
        out[-1].append(i)
        size += len(i) + 1
    return out


def harmless(message: str) -> bool:
    """An scancel error that means there is nothing left to cancel (idempotent cancel)."""
    m = message.lower()
    return any(h in m for h in _HARMLESS)


def scancel_errors(returncode: int, stderr: str, ids: list[str]) -> dict:
    """{id: error} of one ``scancel ID...`` from its exit code and error lines. A job that is
    gone or already finished is no error. A failure no line attributes to an id (scancel
    could not reach slurmctld) is every id's error."""
    out, unattributed = {}, []
    for line in (stderr or "").splitlines():
        m = _ERROR.search(line)
        if m and m.group(1) in ids:
            if not harmless(m.group(2)):
                out[m.group(1)] = m.group(2).strip()
        elif line.strip() and not harmless(line):
            unattributed.append(line.strip())
    if returncode != 0 and not out and unattributed:
        msg = f"scancel exited {returncode}: {'; '.join(unattributed)[:500]}"
        return {i: msg for i in ids}
    return out
