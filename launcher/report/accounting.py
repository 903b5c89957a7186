"""Time accounting of a job's wall time (pure: data in, numbers out).

The wall time runs from the first submission to the end of the last attempt (now, for
a job still open). It is cut into consecutive segments, each with exactly one
category, so the categories add up to the wall time by construction:

``queue_wait``
    waiting in the scheduler before the job's *first* allocation.
``provisioning``
    first allocation -> the program's start inside the job (node boot/allocation, the
    job script, ``setup``, the job-side helper resolving the checkpoint).
``useful_compute``
    the program running, minus checkpoint saves, up to the last checkpoint that a later
    attempt resumed from (all of it for the attempt that completed, or that still runs).
``checkpoint_overhead``
    the synchronous save intervals (the job-side helper's timings: write + commit in the
    durable root) before that point.
``capture_stall``
    the same for saves to a local tier (``checkpoint.local``): the time training was blocked
    while its state was captured and committed on node-local disk (with ``drain: sync``
    also the drain). The drain to the root runs beside training, so its lag (how far the
    durable tier trails the local one) is no wall-time category: ``drain_lag`` sums it up.
``lost_work``
    for every attempt that ended without completing: the time from the end of its last
    checkpoint that was committed *and* used (the next generation resumed from it, or
    the newest one if none followed) to the failure. The failure is the end of the run
    as the scheduler saw it, or, when the job-side heartbeat stopped well before that
    (a crashed node: the scheduler notices only after its timeout), the last heartbeat
    plus one heartbeat interval. An attempt that committed nothing loses its whole run.
``in_job_restart``
    recovery.in_job: inside one attempt, from a run step's failure until its rerun in the same
    allocation starts (the job script's decision, the new generation, checkpoint discovery);
    the work lost by the failed run is ``lost_work`` as for any failure.
``restart_overhead``
    after an attempt that ran: from the failure (so including the scheduler's detection
    delay) until the next attempt's program starts (requeue, queue wait again,
    re-allocation, startup and checkpoint discovery) and, where ``jobside.restore`` recorded
    it, until that program had restored its checkpoint.

Each interruption's lost work and restart overhead is split into its clocks (detection,
cleanup and fencing, reallocation, restore, lost work): ``launcher.report.clocks``.

An attempt lasts until the scheduler's end of its run, or until its last job-side sign
of life (save, heartbeat) if that is later (a preempted program checkpoints after Slurm
marked the run PREEMPTED), but never into the next attempt's run.

Times are POSIX seconds. Job-side times come from the node's clock and scheduler times
have 1 s resolution; every boundary is clamped into its attempt's window, so skew can
move time between neighbouring categories but never creates or loses any.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from launcher.checkpoint.tiers import LOCAL
from launcher.core.status import JobState
from launcher.report.clocks import clock_totals, interruption_clocks
from launcher.report.summary import checkpoint_interval, cost_summary

CATEGORIES = ("queue_wait", "provisioning", "useful_compute", "checkpoint_overhead", "capture_stall", "lost_work",
              "in_job_restart", "restart_overhead")
LABELS = {"queue_wait": "queue wait", "provisioning": "provisioning", "useful_compute": "useful compute",
          "checkpoint_overhead": "checkpoint overhead", "capture_stall": "capture stall",
          "lost_work": "lost work", "in_job_restart": "in-job restart",
          "restart_overhead": "restart overhead"}
# an attempt that ended in one of these did not fail (no lost work is charged for COMPLETED)
COMPLETED = "COMPLETED"
ACTIVE = {s.value for s in JobState if not s.is_terminal}


@dataclass(frozen=True)
class Save:
    start: float
    end: float
    step: int
    committed: bool
    preempt: bool = False  # saved on a preemption notice (not a periodic checkpoint)
    tier: str = ""  # "local": committed on a local tier (checkpoint.local), end = when training went on
    drain_s: Optional[float] = None  # local commit -> this part in the durable root (the drain lag)

    @property
    def capture(self) -> bool:
        return self.tier == LOCAL


@dataclass(frozen=True)
class InJobRun:
    """A run of an attempt that failed and was rerun in the same allocation (recovery.in_job)."""

    failed_at: float
    restarted_at: float  # the rerun's program start
    resume_step: Optional[int]  # the step the rerun resumed from (-1: fresh)
    saves: list
    restored_at: Optional[float] = None  # the rerun's restore ended (jobside.restore), when recorded


@dataclass
class AttemptIn:
    attempt: int
    state: str
    queued: float  # when it began to wait: submission, or the requeue of the previous run
    started: Optional[float] = None  # allocation start (scheduler)
    ended: Optional[float] = None  # None: still pending or running
    program_start: Optional[float] = None  # the job-side helper started its generation
    saves: list = field(default_factory=list)
    resume_step: Optional[int] = None  # the step its generation resumed from (-1: fresh start)
    resume_tier: Optional[str] = None  # the checkpoint tier it restored from (local, peer, durable), when recorded
    generation: Optional[int] = None
    host: Optional[str] = None
    target: str = ""
    native_id: Optional[str] = None
    heartbeat: Optional[float] = None  # the job-side heartbeat's last beat
    heartbeat_interval: Optional[float] = None
    cost_usd: Optional[float] = None  # recorded in the state store (used when no price is known)
    price_per_hour: Optional[float] = None  # $/h of its allocation (submit-time figure, else target price x GPUs)
    price_source: str = ""
    preempt_notice: Optional[float] = None
    noticed: Optional[float] = None  # when the launcher first recorded its end (its "attempt_ended" event)
    restored_at: Optional[float] = None  # the program was back at its resume step (jobside.restore's record)
    in_job: list = field(default_factory=list)  # InJobRun: its earlier runs, oldest first (saves: the last run's)
    # torchft: replica groups restarted alone while the others trained on (no interruption of the job)
    group_restarts: int = 0

    @property
    def active(self) -> bool:
        return self.ended is None or self.state in ACTIVE


@dataclass
class History:
    job_id: str
    t0: float  # first submission
    now: float  # the end of the wall time of a job that is still open
    attempts: list
    jobside: bool = True  # job-side records exist (a checkpoint root): program start and saves are known
    gpus: int = 0  # GPUs of one allocation (nodes x gpus_per_node)
    planned_interval_s: Optional[float] = None  # spec.checkpoint.interval


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    category: str
    attempt: int
    clock: str = ""  # an interruption's clock (launcher.report.clocks): detection, cleanup, reallocation ...

    @property
    def seconds(self) -> float:
        return self.end - self.start


def _clamp(x, lo, hi):
    return lo if x < lo else hi if x > hi else x


def _merge(intervals):
    out = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


@dataclass
class AttemptOut:
    attempt: int
    state: str
    queued: float
    started: Optional[float]
    program_start: Optional[float]
    ended: float
    open: bool
    failed: bool
    last_commit_at: Optional[float]
    last_commit_step: Optional[int]
    used_commit_limit: Optional[int]  # the step the next generation resumed from
    failure_at: Optional[float]
    seconds: dict
    billable_s: float
    cost_usd: Optional[float]
    cost_source: str
    saves: list
    resume_step: Optional[int]
    generation: Optional[int]
    host: Optional[str]
    target: str
    native_id: Optional[str]
    preempt_notice: Optional[float]
    noticed: Optional[float] = None
    restored_at: Optional[float] = None
    restore_end: Optional[float] = None  # the end of its restore, carved out of useful compute (restart overhead)
    scheduler_end: Optional[float] = None  # the end of its run as the scheduler recorded it
    in_job_restarts: int = 0  # its runs (or torchft replica groups) rerun in the same allocation (recovery.in_job)
    in_job_lost_s: float = 0.0  # the lost work of those runs (in seconds["lost_work"]; no interruption's clock)
    resume_tier: Optional[str] = None  # the checkpoint tier it restored from (local, peer, durable), when recorded


@dataclass
class Accounting:
    job_id: str
    t0: float
    t_end: float
    open: bool
    totals: dict
    segments: list
    attempts: list
    interval: dict
    cost: dict
    drain_lag: dict = field(default_factory=dict)
    clocks: list = field(default_factory=list)  # one dict per interruption: launcher.report.clocks

    @property
    def wall_s(self) -> float:
        return self.t_end - self.t0

    @property
    def goodput_pct(self) -> Optional[float]:
        return 100.0 * self.totals["useful_compute"] / self.wall_s if self.wall_s > 0 else None

    def to_dict(self) -> dict:
        wall = self.wall_s
        return {
            "job_id": self.job_id, "t0": self.t0, "t_end": self.t_end, "open": self.open,
            "wall_s": wall, "categories": dict(self.totals),
            "percent": {k: (100.0 * v / wall if wall > 0 else None) for k, v in self.totals.items()},
            "sum_s": sum(self.totals.values()), "goodput_pct": self.goodput_pct,
            "attempts": [a.__dict__ | {"saves": [s.__dict__ for s in a.saves]} for a in self.attempts],
            "failures": [{"attempt": a.attempt, "state": a.state, "at": a.failure_at, "ended": a.ended,
                          "lost_s": a.seconds["lost_work"],
                          "last_commit_step": a.last_commit_step, "last_commit_at": a.last_commit_at}
                         for a in self.attempts if a.failed],
            "interval": self.interval, "cost": self.cost, "drain_lag": self.drain_lag,
            "segments": [{"start": s.start, "end": s.end, "category": s.category, "attempt": s.attempt,
                          **({"clock": s.clock} if s.clock else {})} for s in self.segments],
            "clocks": self.clocks, "clocks_total": clock_totals(self.clocks, self.totals["restart_overhead"]),
        }


def _next_resume(attempts, i) -> Optional[int]:
    """The step the next generation that started resumed from (None if none started)."""
    for b in attempts[i + 1:]:
        if b.program_start is not None and b.resume_step is not None:
            return b.resume_step
    return None


def _next_start(attempts, i) -> Optional[float]:
    for b in attempts[i + 1:]:
        for t in (b.started, b.program_start):
            if t is not None:
                return t
    return None


class _Ledger:
    """The segments and per-category totals, filled in time order."""

    def __init__(self):
        self.totals = {c: 0.0 for c in CATEGORIES}
        self.segments: list = []

    def add(self, a, b, cat, n, sec, clock=""):
        if b > a:
            self.segments.append(Segment(a, b, cat, n, clock))
            self.totals[cat] += b - a
            sec[cat] += b - a


def account(h: History) -> Accounting:
    attempts = sorted(h.attempts, key=lambda a: a.attempt)
    ledger = _Ledger()
    outs: list = []
    cursor = h.t0
    ran_before = False
    is_open = False
    for i, a in enumerate(attempts):
        out = _account_attempt(ledger, h, attempts, i, cursor, ran_before)
        outs.append(out)
        is_open = is_open or out.open
        if a.started is not None or a.program_start is not None:
            ran_before = True
        cursor = out.ended
    t_end = cursor if attempts else max(h.t0, h.now)
    if not attempts:
        ledger.add(h.t0, t_end, "queue_wait", 0, {c: 0.0 for c in CATEGORIES})
        is_open = True
    interval = checkpoint_interval(outs, ledger.totals, h.planned_interval_s)
    cost = cost_summary(outs, ledger.totals, h.gpus)
    segments, clocks = interruption_clocks(ledger.segments, outs, t_end)
    return Accounting(h.job_id, h.t0, t_end, is_open, ledger.totals, segments, outs, interval, cost,
                      drain_lag(outs), clocks)


def _account_attempt(ledger: _Ledger, h: History, attempts: list, i: int, cursor: float,
                     ran_before: bool) -> AttemptOut:
    """Cut attempt ``i``'s window (from ``cursor``) into segments; its summary."""
    a = attempts[i]
    sec = {c: 0.0 for c in CATEGORIES}
    nxt_queued = attempts[i + 1].queued if i + 1 < len(attempts) else None
    end = _attempt_end(attempts, i, nxt_queued, cursor, h.now)
    open_attempt = a.ended is None and nxt_queued is None
    started = a.started if a.started is not None else a.program_start
    started = _clamp(started, cursor, end) if started is not None else end
    ledger.add(cursor, started, "restart_overhead" if ran_before else "queue_wait", a.attempt, sec)
    ps = _program_start(a, started, end, h.jobside)
    ledger.add(started, ps, "restart_overhead" if ran_before else "provisioning", a.attempt, sec)
    rs = ps
    if ran_before and h.jobside and a.restored_at is not None and a.resume_step is not None \
            and a.resume_step >= 0:
        # after an interruption: restoring the checkpoint is part of the recovery, not useful compute
        rs = _clamp(a.restored_at, ps, end)
        ledger.add(ps, rs, "restart_overhead", a.attempt, sec, clock="restore")
    # the runs that failed and were rerun in the allocation (recovery.in_job), after the restore
    # that followed the launcher's interruption; the last run starts where they end
    lost_before = sec["lost_work"]
    run_start = _in_job_runs(ledger, a, sec, rs, end)
    in_job_lost = sec["lost_work"] - lost_before

    # interrupted: ended without completing (failure, cancel), or superseded by a later attempt
    failed = (a.ended is not None and a.state != COMPLETED) or (a.ended is None and nxt_queued is not None)
    limit = _next_resume(attempts, i) if failed else None
    saves = sorted(a.saves, key=lambda s: (s.end, s.step))
    commit_at, commit_step = _last_used_commit(saves, run_start, end, limit)
    good_end, failure_at = _good_end_and_failure(a, failed, commit_at, run_start, end)
    _add_run(ledger, a.attempt, sec, saves, run_start, good_end, failure_at, end)
    billable = _billable(a, started, end)
    cost, how = _attempt_cost(a, billable)
    return AttemptOut(
        attempt=a.attempt, state=a.state, queued=a.queued, program_start=a.program_start,
        # an attempt that ran has a start: the scheduler's, else its program's
        started=a.started if a.started is not None else a.program_start,
        ended=end, open=open_attempt, failed=failed, last_commit_at=commit_at, last_commit_step=commit_step,
        used_commit_limit=limit, failure_at=failure_at if failed else None, seconds=sec, billable_s=billable, cost_usd=cost, cost_source=how,
        saves=saves, resume_step=a.resume_step, generation=a.generation, host=a.host, target=a.target,
        native_id=a.native_id, preempt_notice=a.preempt_notice, noticed=a.noticed, restored_at=a.restored_at,
        restore_end=rs if rs > ps else None, scheduler_end=a.ended,
        in_job_restarts=len(a.in_job) + a.group_restarts, in_job_lost_s=in_job_lost, resume_tier=a.resume_tier)


def _in_job_runs(ledger: _Ledger, a: AttemptIn, sec: dict, ps: float, end: float) -> float:
    """The attempt's runs that failed and were rerun in the job: each one's useful compute and
    saves up to its last commit the rerun used, its lost work up to the failure, then the
    in-job restart until the rerun started, and on until it had restored its checkpoint where
    it recorded that (``jobside.restore``: as the restore after the launcher's interruption,
    never useful compute). Returns where the last run's useful compute begins."""
    for run in a.in_job:
        failed = _clamp(run.failed_at, ps, end)
        restarted = _clamp(run.restarted_at, failed, end)
        if run.restored_at is not None and run.resume_step is not None and run.resume_step >= 0:
            restarted = _clamp(run.restored_at, restarted, end)
        saves = sorted(run.saves, key=lambda s: (s.end, s.step))
        commit_at, _ = _last_used_commit(saves, ps, failed, run.resume_step)
        _add_run(ledger, a.attempt, sec, saves, ps, commit_at if commit_at is not None else ps, failed, failed)
        ledger.add(failed, restarted, "in_job_restart", a.attempt, sec)
        ps = restarted
    return ps


def _attempt_end(attempts: list, i: int, nxt_queued: Optional[float], cursor: float, now: float) -> float:
    a = attempts[i]
    if a.ended is not None:
        end = a.ended
    elif nxt_queued is not None:  # superseded without a recorded end: it ended when the next one queued
        end = nxt_queued
    else:
        end = now
    if a.ended is not None or nxt_queued is not None:
        # the program may outlive the scheduler's end of the run (a preempted job checkpoints
        # after Slurm marked it PREEMPTED): the attempt lasts until its last job-side sign of
        # life, but never into the next attempt's run
        seen = [s.end for s in a.saves] + [t for t in (a.program_start, a.heartbeat) if t is not None]
        nxt = _next_start(attempts, i)
        if seen:
            end = max(end, min(max(seen), nxt) if nxt is not None else max(seen))
    return max(end, cursor)


def _program_start(a: AttemptIn, started: float, end: float, jobside: bool) -> float:
    if not jobside:
        return started
    if a.program_start is not None:
        return _clamp(a.program_start, started, end)
    return end  # the program never started (or left no record): all of it was startup


def _last_used_commit(saves: list, ps: float, end: float, limit: Optional[int]) -> tuple:
    """(time, step) of the last commit a later generation could use (1 s slack: scheduler clocks)."""
    commit_at, commit_step = None, None
    for s in saves:
        if s.committed and s.end <= end + 1.0 and (limit is None or s.step <= limit):
            commit_at, commit_step = _clamp(s.end, ps, end), s.step
    return commit_at, commit_step


def _good_end_and_failure(a: AttemptIn, failed: bool, commit_at, ps: float, end: float) -> tuple:
    """(end of the work that counts, the failure): lost work lies between them."""
    failure_at = end
    if failed:
        good_end = commit_at if commit_at is not None else ps
        if a.heartbeat is not None and a.heartbeat_interval:
            # the process died at most one interval after its last beat
            failure_at = _clamp(a.heartbeat + a.heartbeat_interval, good_end, end)
    else:
        good_end = end
    return good_end, failure_at


def _add_run(ledger: _Ledger, n: int, sec: dict, saves: list, ps, good_end, failure_at, end) -> None:
    """Useful compute and checkpoint saves up to good_end, then lost work, then the undetected failure."""
    ck = _merge([(_clamp(s.start, ps, good_end), _clamp(s.end, ps, good_end)) for s in saves])
    sync = _merge([(_clamp(s.start, ps, good_end), _clamp(s.end, ps, good_end)) for s in saves if not s.capture])
    t = ps
    for x, y in ck:
        ledger.add(t, x, "useful_compute", n, sec)
        # a blocked interval with any synchronous durable save in it is checkpoint overhead
        ledger.add(x, y, "checkpoint_overhead" if any(a < y and b > x for a, b in sync) else "capture_stall", n, sec)
        t = y
    ledger.add(t, good_end, "useful_compute", n, sec)
    ledger.add(good_end, failure_at, "lost_work", n, sec)
    ledger.add(failure_at, end, "restart_overhead", n, sec)  # the scheduler had not noticed yet


def drain_lag(outs) -> dict:
    """How far the durable tier trailed the local one: per local-tier save, the seconds from its
    local commit until its part was in the root (recorded by the drainer); plus the saves
    still not drained when their attempt ended (committed locally, no drain time recorded)."""
    lags, undrained = [], 0
    for a in outs:
        for s in a.saves:
            if s.capture and s.committed:
                if s.drain_s is None:
                    undrained += 1
                else:
                    lags.append(s.drain_s)
    return {"saves": len(lags), "mean_s": (sum(lags) / len(lags)) if lags else None,
            "max_s": max(lags) if lags else None, "undrained": undrained}


def _billable(a: AttemptIn, started: float, end: float) -> float:
    """The allocation time the attempt is charged for: the scheduler's own start and end of the
    run where it recorded both (what a site bills). Neither is clamped to a neighbour: a job-side
    sign of life past the scheduler's end (whose times are whole seconds on Slurm, so up to 1 s
    early) moves category boundaries, not the bill. Without both, from its start (else its
    program's) to the attempt's END (now, for one still running)."""
    raw_start = a.started if a.started is not None else a.program_start
    if raw_start is None:
        raw_start = started
    raw_end = a.ended if a.ended is not None and a.started is not None else end
    return max(0.0, raw_end - raw_start)


def _attempt_cost(a: AttemptIn, billable: float) -> tuple[Optional[float], str]:
    # the price x the allocation time seen here (the recorded cost is a running figure the
    # launcher updated when it last looked, stale for a run Slurm requeued in between)
    if a.price_per_hour is not None:
        return a.price_per_hour * billable / 3600.0, a.price_source or "price"
    if a.cost_usd is not None:
        return a.cost_usd, "recorded"
    return None, "no price"
