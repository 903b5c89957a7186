"""Slurm's ways of writing time, read and written in one place.

* Timestamps (``scontrol``, ``squeue``, ``sacct``, ``sbatch --test-only``, ``sinfo -R``):
  ``YYYY-MM-DDTHH:MM:SS`` in the cluster's local time, without a zone; ``Unknown``,
  ``None``, ``N/A`` or nothing when there is none. ``parse_timestamp`` is the only parser
  of them; ``epoch`` gives the same instant as seconds since the epoch, read as this
  machine's local time (what the report and the status rows keep).
* Durations written for Slurm (``--time``, ``--switches=N@WAIT``): ``format_time``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Optional

_NO_TIMESTAMP = ("", "UNKNOWN", "NONE", "N/A")


def parse_timestamp(text) -> Optional[datetime]:
    """A Slurm timestamp -> a naive datetime (the cluster's local time), or None."""
    if not text or not isinstance(text, str):
        return None
    t = text.strip()
    if t.upper() in _NO_TIMESTAMP:
        return None
    try:
        return datetime.fromisoformat(t)
    except ValueError:
        return None


def epoch(text) -> Optional[float]:
    """A Slurm timestamp -> seconds since the epoch (read as local time), or None."""
    d = parse_timestamp(text)
    if d is None:
        return None
    try:
        return d.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


def format_time(seconds: int) -> str:
    """Seconds -> Slurm's D-HH:MM:SS (rounded up to whole minutes Slurm would not, so keep seconds)."""
    if seconds < 0:
        raise ValueError("negative duration")
    d, rem = divmod(int(seconds), 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"
