"""An interruption's clocks (pure): its lost work and restart overhead, split where the records
say each phase of the recovery began.

For every attempt that ran and was interrupted (failed, preempted, cancelled, stopped), the
time from its failure F to the moment its replacement was back at the resume step is cut at
the records' boundaries:

``detection``
    F (the scheduler's end of the run, or one heartbeat interval after the last heartbeat of
    a crashed node) -> the failure was noticed: by the scheduler when it requeued the job in
    place (its end of the run), else by the launcher (the first status call that recorded the
    attempt's end: its ``attempt_ended`` event). An attempt the launcher ended itself (a
    cancel) needs no detection: 0.
``cleanup``
    noticed -> the replacement's submission (deciding, fencing the old writers under the job's
    claim, the dedupe lookup, rendering, submitting); with no replacement, the launcher
    closing the job.
``reallocation``
    the replacement's submission -> its program's start (queue wait, allocation, node
    startup, ``setup``, the job-side helper finding the checkpoint); attempts that never
    started in between (no capacity) are part of it.
``restore``
    the replacement's program start -> the program back at the resume step (``jobside.restore``
    records when it handed the checkpoint over). Carved out of useful compute.
``lost_work``
    the interrupted attempt's time since the end of the last checkpoint that was committed and
    used, up to F: the steps the replacement computes again.

Every second of the job's ``restart_overhead`` and ``lost_work`` goes to exactly one
interruption's clock (or, for a boundary no record gives, to its ``unsplit_s``: never to a
clock it may not belong to), so the clocks add up to the wall time with the other categories.
A run rerun inside its allocation (recovery.in_job) is no interruption here: its restart is the
``in_job_restart`` category and its lost work (``lost_work`` too) is the attempt's
``in_job_lost_s``, in no interruption's clock.
A clock that cannot be known is None, with the reason in ``unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

CLOCKS = ("detection", "cleanup", "reallocation", "restore", "lost_work")
RESTART = "restart_overhead"
UNSPLIT = "unsplit"  # detection and cleanup together, when no record says where one ended
LABELS = {"detection": "detection", "cleanup": "cleanup and fencing", "reallocation": "reallocation",
          "restore": "restore", "lost_work": "lost work", UNSPLIT: "detection and cleanup (not split)"}
EPS = 1e-6


def _ran(a) -> bool:
    return a.started is not None or a.program_start is not None


def _clamp(x, lo, hi):
    return lo if x < lo else hi if x > hi else x


def _windows(segments: list, interrupted: list) -> tuple[dict, list]:
    """({attempt number of an interruption: its restart_overhead segments}, the restart_overhead
    segments that follow no interruption): an interruption's window opens at its failure and
    runs through the restart overhead that follows without a break."""
    order = sorted(range(len(segments)), key=lambda k: (segments[k].start, k))
    opening = sorted(interrupted, key=lambda a: a.failure_at)
    out: dict = {a.attempt: [] for a in interrupted}
    stray, current, nxt = [], None, 0
    for k in order:
        s = segments[k]
        while nxt < len(opening) and opening[nxt].failure_at <= s.start + EPS:
            current, nxt = opening[nxt].attempt, nxt + 1
        if s.category == RESTART:
            (out[current] if current is not None else stray).append(k)
        else:
            current = None
    return out, stray


def _noticed(a, nxt) -> tuple[Optional[float], str]:
    """(when A's failure was noticed, by whom) or (None, why not known)."""
    if _in_place(a, nxt):
        if a.scheduler_end is None:
            return None, "the scheduler requeued it in place, but its end of the run is not known"
        return a.scheduler_end, "scheduler"
    if a.noticed is not None:
        return a.noticed, "launcher"
    if a.state == "CANCELLED":
        return a.failure_at, "launcher (it ended the attempt)"
    return None, "no record of when the launcher noticed the end (a store written before it recorded that)"


def _cut(seg, bounds: list) -> list:
    """SEG cut at BOUNDS [(time, clock from there on)] (ascending): [(start, end, clock)]."""
    out, t, clock = [], seg.start, None
    for b, c in bounds:
        if b <= seg.start:
            clock = c
            continue
        if b >= seg.end:
            break
        out.append((t, b, clock))
        t, clock = b, c
    out.append((t, seg.end, clock))
    return [p for p in out if p[1] > p[0]]


@dataclass(frozen=True)
class _Interruption:
    """What the records say about one interruption's recovery, its boundaries clamped into its window."""
    attempt: object  # the interrupted ``AttemptOut``
    nxt: object  # the attempt after it (its replacement), or None
    rep: object  # the first attempt after it that ran, or None
    ks: list  # its window: the indices of its restart_overhead segments
    restore: list  # the window's segments tagged ``restore``
    window_end: float
    noticed: Optional[float]
    noticed_by: str  # who noticed it, or why that is not known
    detected: Optional[float]  # NOTICED clamped into the window (detection -> cleanup), or None
    resubmitted: Optional[float]  # the replacement's submission clamped into the window (-> reallocation)

    @property
    def in_place(self) -> bool:
        return _in_place(self.attempt, self.nxt)


def _in_place(a, nxt) -> bool:
    """Whether NXT is A requeued in place by the scheduler (the same native id)."""
    return bool(nxt is not None and a.native_id and nxt.native_id == a.native_id)


def _interruption(a, outs: list, segments: list, ks: list) -> _Interruption:
    """The interruption of A (in OUTS) whose window is the segments KS."""
    after = outs[outs.index(a) + 1:]
    nxt = after[0] if after else None
    rep = next((b for b in after if _ran(b)), None)
    segs = [segments[k] for k in ks]
    f = a.failure_at
    w = max([s.end for s in segs], default=f)
    restore = [s for s in segs if s.clock == "restore"]
    back = restore[0].start if restore else w  # the replacement's restore begins (or the window ends)
    noticed, by = _noticed(a, nxt)
    d = _clamp(noticed, f, back) if noticed is not None else None
    resubmitted = _clamp(nxt.queued, d if d is not None else f, back) if nxt is not None else None
    return _Interruption(a, nxt, rep, ks, restore, w, noticed, by, d, resubmitted)


def _bounds(it: _Interruption) -> list:
    """IT's clocks' boundaries in its window [(time, clock from there on)], ascending: detection
    from the failure and cleanup from its noticing (unsplit when no record says when that was),
    then reallocation from the replacement's submission."""
    f = it.attempt.failure_at
    head = [(f, "detection"), (it.detected, "cleanup")] if it.detected is not None else [(f, UNSPLIT)]
    return head + ([(it.resubmitted, "reallocation")] if it.resubmitted is not None else [])


def _split_window(segments: list, ks: list, bounds: list) -> tuple[dict, dict]:
    """({index in KS: that segment cut at BOUNDS, each piece tagged with its clock}, {clock: seconds}).
    A segment already tagged ``restore`` stays whole."""
    cut, secs = {}, {c: 0.0 for c in (*CLOCKS, UNSPLIT)}
    for k in ks:
        s = segments[k]
        parts = [(s.start, s.end, "restore")] if s.clock == "restore" else _cut(s, bounds)
        cut[k] = [replace(s, start=x, end=y, clock=c or "") for x, y, c in parts]
        for x, y, c in parts:
            secs[c or UNSPLIT] += y - x
    return cut, secs


def _unknown(it: _Interruption) -> dict:
    """{clock's key: why no record gives it} for IT."""
    unknown: dict = {}
    if it.detected is None:
        unknown["detection_s"] = unknown["cleanup_s"] = it.noticed_by
    if it.nxt is None:
        unknown["reallocation_s"] = "no replacement: the job ended here"
    unknown.update(_restore_unknown(it.rep, it.nxt, it.restore))
    return unknown


def _entry(it: _Interruption, secs: dict) -> dict:
    """IT's report entry, its clocks' seconds SECS (None where no record gives the clock)."""
    a, nxt, rep = it.attempt, it.nxt, it.rep
    entry = {"attempt": a.attempt, "state": a.state, "replacement": nxt.attempt if nxt is not None else None,
             "in_place": it.in_place, "failure_at": a.failure_at, "noticed_at": it.noticed,
             "noticed_by": it.noticed_by if it.noticed is not None else None,
             "resubmitted_at": nxt.queued if nxt is not None else None,
             "program_start": rep.program_start if rep is not None else None,
             "restored_at": rep.restore_end if rep is not None else None}
    unknown = _unknown(it)
    for c in CLOCKS:
        entry[f"{c}_s"] = None if f"{c}_s" in unknown else secs[c]
    entry["lost_work_s"] = a.seconds["lost_work"] - a.in_job_lost_s  # its last run's: not its in-job reruns'
    entry["unsplit_s"] = secs[UNSPLIT]
    entry["total_s"] = sum(secs.values()) + entry["lost_work_s"]
    if it.noticed is not None and it.noticed > it.window_end + EPS and nxt is None:
        entry["noticed_after_end_s"] = it.noticed - it.window_end  # past the wall time's end: the job had ended
    entry["unknown"] = unknown
    return entry


def interruption_clocks(segments: list, outs: list, t_end: float) -> tuple[list, list]:
    """(SEGMENTS with the restart overhead of each interruption cut at its clocks' boundaries and
    tagged with its clock, [one dict per interruption]). OUTS: ``AttemptOut`` in attempt order."""
    interrupted = [a for a in outs if a.failed and _ran(a) and a.failure_at is not None]
    windows, stray = _windows(segments, interrupted)
    # restart overhead after no interruption (after an attempt that completed) is no clock's
    cut: dict = {k: [replace(segments[k], clock="")] for k in stray}
    clocks = []
    for a in interrupted:
        it = _interruption(a, outs, segments, windows[a.attempt])
        pieces, secs = _split_window(segments, it.ks, _bounds(it))
        cut.update(pieces)
        clocks.append(_entry(it, secs))
    return [piece for k, s in enumerate(segments) for piece in cut.get(k, [s])], clocks


def _restore_unknown(rep, nxt, restore: list) -> dict:
    if nxt is None:
        return {"restore_s": "no replacement: the job ended here"}
    if rep is None:
        return {"restore_s": "the replacement's program has not started yet"}
    if restore:
        return {}
    if rep.resume_step is None:
        return {"restore_s": "no job-side record of the replacement's start (no checkpoint root, or unreadable)"}
    if rep.resume_step < 0:
        return {}  # a fresh start: nothing to restore (0 s)
    return {"restore_s": f"no record of when the program was back at step {rep.resume_step} (jobside.restore "
                         f"records it): that time counts as useful compute"}


def clock_totals(clocks: list, restart_s: float = 0.0) -> dict:
    """Each clock summed over the interruptions (None where no interruption knows it), the
    seconds no record could split, and the restart overhead (RESTART_S in all) that follows no
    interruption (an attempt after one that completed)."""
    out = {}
    for c in CLOCKS:
        known = [x[f"{c}_s"] for x in clocks if x.get(f"{c}_s") is not None]
        out[f"{c}_s"] = sum(known) if known else None
    out["unsplit_s"] = sum(x.get("unsplit_s") or 0.0 for x in clocks)
    out["interruptions"] = len(clocks)
    split = sum((x.get(f"{c}_s") or 0.0) for x in clocks for c in CLOCKS if c != "lost_work") + out["unsplit_s"]
    out["unassigned_s"] = max(0.0, restart_s - split)
    return out


def combine_totals(parts: list) -> dict:
    """The ``clock_totals`` of many jobs (a sweep's elements) summed: a clock no job knows stays None."""
    parts = [p for p in parts if p]
    out: dict = {}
    for k in [*(f"{c}_s" for c in CLOCKS), "unsplit_s", "unassigned_s", "interruptions"]:
        known = [p[k] for p in parts if p.get(k) is not None]
        out[k] = sum(known) if known else (0 if k in ("unsplit_s", "unassigned_s", "interruptions") else None)
    return out


def totals_line(tot: Optional[dict], dur) -> Optional[str]:
    """The clocks summed over every interruption, as one line (DUR formats seconds); None without one."""
    if not tot or not tot.get("interruptions"):
        return None
    return (f"{tot['interruptions']} interruption(s): "
            + ", ".join(f"{LABELS[k]} {dur(tot.get(f'{k}_s'))}" for k in CLOCKS)
            + (f", detection and cleanup not split {dur(tot['unsplit_s'])}" if tot.get("unsplit_s") else ""))
