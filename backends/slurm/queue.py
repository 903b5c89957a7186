"""Expected queue wait on a Slurm partition, as pure functions of captured command output.

The Slurm backend runs the commands (locally or over SSH) and passes their text here;
nothing in this module runs a process, so every estimate is testable from a string.
Three sources, best first:

1. ``sbatch --test-only ...`` for the job itself: Slurm's own prediction
   ("sbatch: Job 123 to start at 2026-11-20T12:00:00 using 64 processors on nodes n[1-2] in partition gpu").
2. The pending work ahead in the partition, simulated: ``squeue -h -p PART -t PD,R -o
   SQUEUE_JOBS_FORMAT`` and ``sinfo -h -N -p PART -o SINFO_NODES_FORMAT``. Running jobs free
   their nodes when their time left runs out; pending jobs start in priority order (no
   backfill) for their time limit; our job starts when enough nodes are free. Time limits
   are what users ask for, not what jobs use: ``runtime_fraction`` scales them (1.0 is an
   upper bound).
3. ``squeue --start`` (default table or ``-o SQUEUE_START_FORMAT``): we start no earlier
   than the latest predicted start of the jobs pending in the partition.

Times printed by Slurm are the cluster's local time without a zone: pass ``now`` from the
same clock (``date +%Y-%m-%dT%H:%M:%S`` on the cluster, captured with the rest).
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Optional

from launcher.backend.protocols import QueueEstimate  # hours (inf: it cannot start), source: how it was obtained

from launcher_backends.slurm.times import parse_timestamp

SQUEUE_JOBS_FORMAT = "%i|%P|%T|%D|%l|%L|%Q"     # id, partition, state, nodes, limit, time left, priority
SINFO_NODES_FORMAT = "%N|%R|%T"                  # node, partition, state (the probe's longer format works too)
SQUEUE_START_FORMAT = "%i|%P|%T|%S|%D"           # id, partition, state, start time, nodes

_USABLE = {"idle", "mixed", "allocated", "completing", "planned", "reserved"}
_NO_TIME = {"", "unlimited", "infinite", "invalid", "not_set", "n/a", "none"}
_TIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_slurm_duration(text: str) -> Optional[float]:
    """Slurm's time formats -> seconds: ``D-HH:MM:SS``, ``D-HH:MM``, ``D-HH``, ``HH:MM:SS``,
    ``MM:SS``, ``MM``. ``UNLIMITED``, ``INVALID``, ``NOT_SET`` -> None."""
    t = text.strip()
    if t.lower() in _NO_TIME:
        return None
    m = _TIME_RE.match(t)
    if not m:
        raise ValueError(f"not a Slurm duration: {text!r}")
    days, a, b, c = m.groups()
    nums = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:
        h, mi, s = (nums + [0, 0])[:3]
        return float(int(days) * 86400 + h * 3600 + mi * 60 + s)
    if len(nums) == 3:
        return float(nums[0] * 3600 + nums[1] * 60 + nums[2])
    if len(nums) == 2:
        return float(nums[0] * 60 + nums[1])
    return float(nums[0] * 60)


# --- 1. sbatch --test-only ------------------------------------------------------------

_TEST_ONLY_RE = re.compile(r"Job\s+\d+\s+to start at\s+(\S+)")


def wait_from_test_only(text: str, now: datetime) -> Optional[QueueEstimate]:
    m = _TEST_ONLY_RE.search(text)
    if not m:
        return None
    start = parse_timestamp(m.group(1))
    if start is None:
        return None
    return QueueEstimate(max(0.0, (start - now).total_seconds() / 3600.0), "sbatch --test-only")


# --- 3. squeue --start ----------------------------------------------------------------

_START_ROW_RE = re.compile(
    r"^\s*(\S+)\s+(\S+)\s+.*?\s(PD|PENDING|R|RUNNING|CF|CONFIGURING)\s+"
    r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|N/A)\s+(\d+)\b")


def parse_squeue_start(text: str) -> list[tuple[str, str, Optional[datetime], int]]:
    """(job id, partition, predicted start or None, nodes) for each row of ``squeue --start``."""
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith("JOBID"):
            continue
        if "|" in line:
            f = [x.strip() for x in line.split("|")]
            if len(f) < 5:
                continue
            nodes = int(f[4]) if f[4].isdigit() else 1
            rows.append((f[0], f[1].rstrip("*"), parse_timestamp(f[3]), nodes))
            continue
        m = _START_ROW_RE.match(line)
        if m:
            rows.append((m.group(1), m.group(2).rstrip("*"), parse_timestamp(m.group(4)), int(m.group(5))))
    return rows


def wait_from_squeue_start(text: str, partition: str, now: datetime) -> Optional[QueueEstimate]:
    starts = [s for _, p, s, _ in parse_squeue_start(text) if p == partition and s is not None]
    if not starts:
        return None
    return QueueEstimate(max(0.0, (max(starts) - now).total_seconds() / 3600.0),
                         f"squeue --start: {len(starts)} pending job(s) predicted")


# --- 2. pending work ahead --------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class QueuedJob:
    job_id: str
    partition: str
    state: str            # PENDING / RUNNING / ...
    nodes: int
    limit_s: Optional[float]
    left_s: Optional[float]
    priority: float


def parse_squeue_jobs(text: str) -> list[QueuedJob]:
    """Rows of ``squeue -h -o SQUEUE_JOBS_FORMAT``; lines that do not fit are skipped."""
    jobs = []
    for line in text.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 6 or not f[3].isdigit():
            continue
        try:
            limit = parse_slurm_duration(f[4])
            left = parse_slurm_duration(f[5])
        except ValueError:
            continue
        prio = float(f[6]) if len(f) > 6 and re.match(r"^\d+(\.\d+)?$", f[6]) else 0.0
        state = {"PD": "PENDING", "R": "RUNNING", "CG": "COMPLETING"}.get(f[2].upper(), f[2].upper())
        for part in f[1].split(","):  # a job may be queued on several partitions
            jobs.append(QueuedJob(f[0], part.rstrip("*"), state, int(f[3]), limit, left, prio))
    return jobs


def parse_sinfo_nodes(text: str) -> dict[str, dict[str, str]]:
    """``{partition: {node: state}}`` from ``sinfo -h -N -o '%N|%R|%T[|...]'``."""
    parts: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 3 or not f[0]:
            continue
        parts.setdefault(f[1].rstrip("*"), {})[f[0]] = f[2].lower()
    return parts


def _usable(state: str) -> bool:
    # "idle*" / "mixed~" etc.: a suffix marks a node not responding or powered down
    return state.rstrip("*~#!%$@^-") == state and state.split("+")[0] in _USABLE


class _ListSchedule:
    """A partition's nodes as jobs take and free them, in hours from now: how many are free,
    when the busy ones free up (RELEASES, a heap of (hour, nodes)), and how far the schedule
    has got."""

    def __init__(self, capacity: int, free: int, releases: list):
        self.capacity, self.free, self.releases, self.now = capacity, free, releases, 0.0

    def start_time(self, need: int) -> float:
        """When NEED nodes are free at once (inf: never, within the releases known)."""
        while self.free < need and self.releases:
            t, n = heapq.heappop(self.releases)
            self.now = max(self.now, t)
            self.free = min(self.capacity, self.free + n)  # jobs sharing nodes must not free more than exist
        return self.now if self.free >= need else float("inf")

    def run(self, start: float, hours: float, nodes: int) -> None:
        """A job takes NODES from START for HOURS."""
        self.free -= nodes
        heapq.heappush(self.releases, (start + hours, nodes))


def _running_releases(jobs: list, runtime_fraction: float, unlimited_hours: float) -> tuple[list, int]:
    """(a heap of (hour, nodes) when the running JOBS free their nodes, how many nodes they hold)."""
    releases: list[tuple[float, int]] = []
    busy = 0
    for j in jobs:
        if j.state in ("RUNNING", "COMPLETING"):
            left = j.left_s if j.left_s is not None else unlimited_hours * 3600
            heapq.heappush(releases, (left * runtime_fraction / 3600.0, j.nodes))
            busy += j.nodes
    return releases, busy


def _schedule_pending(sched: _ListSchedule, jobs: list, runtime_fraction: float, unlimited_hours: float) -> int:
    """Schedule the pending JOBS, highest priority first, each for its time limit; how many start
    (those ahead of ours)."""
    ahead = 0
    for j in sorted((j for j in jobs if j.state == "PENDING"), key=lambda j: -j.priority):
        if j.nodes > sched.capacity:
            continue  # never starts; does not hold anyone up
        t = sched.start_time(j.nodes)
        if t == float("inf"):
            break
        sched.run(t, (j.limit_s if j.limit_s is not None else unlimited_hours * 3600) * runtime_fraction / 3600.0,
                  j.nodes)
        ahead += 1
    return ahead


def wait_from_pending_work(squeue_text: str, sinfo_text: str, partition: str, nodes: int,
                           runtime_fraction: float = 1.0, unlimited_hours: float = 24.0) -> QueueEstimate:
    """List-schedule the partition's running and pending jobs, then ours (see module doc)."""
    node_states = parse_sinfo_nodes(sinfo_text).get(partition)
    if not node_states:
        return QueueEstimate(float("inf"), f"partition {partition} has no nodes in sinfo output")
    usable = [n for n, s in node_states.items() if _usable(s)]
    capacity = len(usable)
    if nodes > capacity:
        return QueueEstimate(float("inf"), f"partition {partition} has {capacity} usable node(s), "
                                           f"the job needs {nodes}")
    free = sum(1 for n in usable if node_states[n].startswith("idle"))
    jobs = [j for j in parse_squeue_jobs(squeue_text) if j.partition == partition]
    releases, busy = _running_releases(jobs, runtime_fraction, unlimited_hours)
    # Nodes busy with jobs we cannot see (other partitions on shared nodes, jobs of other
    # users hidden by PrivateData) are assumed free when the last visible job ends.
    hidden = capacity - free - busy
    if hidden > 0:
        horizon = max((t for t, _ in releases), default=unlimited_hours * runtime_fraction)
        heapq.heappush(releases, (horizon, hidden))
    sched = _ListSchedule(capacity, free, releases)
    ahead = _schedule_pending(sched, jobs, runtime_fraction, unlimited_hours)
    wait = sched.start_time(nodes)
    if wait == float("inf"):
        # the listed jobs never free enough nodes: the rest are held by jobs we cannot see
        return QueueEstimate(float("inf"), f"{partition}: not enough nodes free up within the listed jobs")
    return QueueEstimate(wait, f"{ahead} pending and {busy} busy node(s) ahead in {partition} "
                               f"(time limits x {runtime_fraction:g})")


def estimate_queue_wait(partition: str, nodes: int, *, now: Optional[datetime] = None,
                        test_only_text: str = "", squeue_text: str = "", sinfo_text: str = "",
                        squeue_start_text: str = "", runtime_fraction: float = 1.0) -> Optional[QueueEstimate]:
    """The best estimate the captured texts allow, or None when none of them says anything."""
    if test_only_text and now is not None:
        est = wait_from_test_only(test_only_text, now)
        if est is not None:
            return est
    if squeue_text and sinfo_text:
        return wait_from_pending_work(squeue_text, sinfo_text, partition, nodes, runtime_fraction)
    if squeue_start_text and now is not None:
        return wait_from_squeue_start(squeue_start_text, partition, now)
    return None
