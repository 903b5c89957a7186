"""Which open jobs a watch pass decides on: the ones that changed, and the ones that are due.
Pure: no I/O (``launcher.recovery.watch`` reads the marks, ``launcher.state.marks`` stores them).

A pass asks each target once for the status of its open jobs (``launcher.launching.tracking``).
A job whose status and row are what they were when a watcher last found it running with
nothing to do (its mark's ``seen``), and whose mark is not due, costs nothing more: no read,
no decision, no write. Everything else goes through the whole decision as before:

* a status that differs in anything the decision reads (state, the scheduler's own state and
  reason, exit code, restarts, nodes, start and end), or a status call that failed;
* a job row written since (``updated``: a recovery state saved, a cancel, a stop asked for,
  a resubmission: every write to a job row stamps it);
* a job with a clock that only a pass can act on (``every_pass``): a burst race under way, a
  pending job that may burst, a job with a deadline, a running job with ``recovery.hang``;
* a mark that is due: a job with a checkpoint root every ``progress_every`` seconds (its
  progress is read into the store then), any other at least every ``revisit`` seconds.

Only the outcome "running" leaves a mark: a job waiting, retrying, lost, claimed by another
watcher or in trouble is decided again at every pass, as before.
"""

from __future__ import annotations

import zlib
from typing import Optional

from launcher.core.status import JobState, Status

PROGRESS_EVERY_S = 60.0  # a running job with a checkpoint root: its progress read at least this often
REVISIT_S = 600.0  # any other running job: decided on again at least this often, change or not


def fingerprint(row, st) -> Optional[str]:
    """What the decision on an open job reads that can change between passes: the status the
    scheduler gave (ST) and when the job row was last written. None when ST is not a status
    (the target's query failed): such a job is always decided on."""
    if not isinstance(st, Status):
        return None
    return (f"{st.state.value}\x1f{st.native_state}\x1f{st.reason}\x1f{st.exit_code!r}\x1f{st.restarts!r}\x1f"
            f"{st.nodes}\x1f{st.start_time!r}\x1f{st.end_time!r}\x1f{row.state}\x1f{row.updated!r}")


def unchanged(mark: Optional[tuple], seen: Optional[str], now: float) -> bool:
    """Whether a job whose fingerprint is SEEN now may be passed over: its MARK ((seen, due), or
    None) records the same fingerprint and is not due yet."""
    return seen is not None and mark is not None and mark[0] == seen and now < mark[1]


def every_pass(rs, spec, st) -> bool:
    """Whether a job has a clock that only a pass acts on, so that it is decided on at every pass
    even when nothing changed: a burst race under way (RS), a job with a deadline, a running job
    with ``recovery.hang``, a pending job
    whose spec may burst it (SPEC: the job's JobSpec; ST: its status)."""
    if rs.racing or spec.cost.deadline is not None:
        return True
    if spec.recovery.hang is not None and isinstance(st, Status) and st.state is JobState.RUNNING:
        return True  # recovery.hang: a hang is found within one interval of its limit
    return bool(spec.burst.to and spec.burst.after) and isinstance(st, Status) and st.state is JobState.PENDING


def due(row, now: float, progress_every: float = PROGRESS_EVERY_S, revisit: float = REVISIT_S) -> float:
    """When a job found running with nothing to do at NOW must be decided on again, change or not."""
    return now + (min(progress_every, revisit) if row.ckpt_root else revisit)


def spread(job_ids: list, watcher: str) -> list:
    """JOB_IDS in the order WATCHER decides on them: rotated to start where WATCHER's name (a
    random token per process) points, so that watchers passing over the same changed jobs at once
    start apart, each taking the claims of its own stretch (``StateStore.claim(wait=False)``),
    instead of queueing one behind the other on every job. Every job is still visited."""
    if len(job_ids) < 2:
        return list(job_ids)
    start = zlib.crc32(watcher.encode()) % len(job_ids)
    return job_ids[start:] + job_ids[:start]
