"""Hangs (``recovery.hang``), decided without I/O: a job whose processes are alive but that
reported no step for too long.

A step is reported by ``report(step, ...)`` (``launcher.jobside.report``): each report is a line
of ``ROOT/.launcher/metrics/g<G>.jsonl`` with the time it was made. The run watched is the newest
generation of the job's running attempt (its first start, or the latest in-job rerun of it).
A run is judged only once it reported a step: start-up, restore and compilation take as long
as they take, and a run that never reports is never called hung.

The limit is ``recovery.hang`` (seconds), or with ``auto`` twice the longest gap between two
successive step reports of that run (the last ``GAPS`` gaps) plus ``AUTO_SLACK_S``: auto is
armed from the run's second report on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Optional, Union

from launcher.recovery.injob import restarts_by_attempt
from launcher.recovery.takeover import attempt_records

EVENT = "hang_detected"
CANCEL_EVENT = "hang_cancelled"  # nothing could be killed: the attempt was cancelled through its backend
CANCEL_FAILED_EVENT = "hang_cancel_failed"  # ... and that cancel failed: tried again at the next pass
KILL, CANCEL = "kill", "cancel"  # how the launcher ended a hung run ("": not ended yet)
HANG_META = "hang"  # the attempt's meta: what the launcher did about its hangs
STACKS_DIR = ".launcher/stacks"  # under the checkpoint root: g<G>/<host>.<pid>.txt (the job side's faulthandler)
AUTO = "auto"
AUTO_SLACK_S = 60.0
GAPS = 16


@dataclass(frozen=True)
class Hang:
    """A run found hung: no step reported for AGE_S, at least LIMIT_S."""

    generation: int
    step: int  # the last step it reported
    last_at: float  # when (epoch seconds)
    age_s: float
    limit_s: float


def stacks_key(generation: int) -> str:
    return "%s/g%d" % (STACKS_DIR, int(generation))


def report_times(data: Union[bytes, str]) -> list[tuple[int, float]]:
    """[(step, when reported, epoch seconds)] of one generation's metrics file, in file order;
    lines that are not reports with a time are skipped."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    out = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
            step, at = doc["step"], datetime.fromisoformat(str(doc["at"]).replace("Z", "+00:00")).timestamp()
        except (ValueError, TypeError, KeyError):
            continue
        if isinstance(step, int) and not isinstance(step, bool):
            out.append((step, at))
    return out


def limit_s(setting, times: list[float]) -> Optional[float]:
    """Seconds without a step report that make a hang: SETTING (``recovery.hang``: None, seconds
    or "auto") against TIMES, when the run reported its steps. None: not armed."""
    if setting is None or not times:
        return None
    if setting != AUTO:
        return float(setting)
    gaps = [b - a for a, b in zip(times, times[1:])][-GAPS:]
    if not gaps:
        return None
    return 2.0 * max(0.0, max(gaps)) + AUTO_SLACK_S


def judge(setting, generation: int, reports: list[tuple[int, float]], now: float) -> Optional[Hang]:
    """The hang of run GENERATION with step REPORTS ((step, at), file order) at NOW, or None."""
    times = [at for _, at in reports]
    limit = limit_s(setting, times)
    if limit is None:
        return None
    step, last = reports[-1][0], max(times)
    age = now - last
    return Hang(generation, step, last, age, limit) if age >= limit else None


def current_generation(job_id: str, attempt: int, history: Iterable[dict]) -> Optional[int]:
    """The newest run of ATTEMPT of the job: the generation of its start, or of its latest in-job
    rerun (GENERATIONS.json HISTORY). None: the attempt's program has not started."""
    history = list(history)
    first = attempt_records(job_id, [attempt], [h for h in history if not isinstance(h.get("in_job"), dict)])
    if attempt not in first:
        return None
    gens = [first[attempt]["generation"]]
    gens += [h["generation"] for h in restarts_by_attempt(job_id, [attempt], history).get(attempt, [])]
    return max(gens)


def already_acted(meta: Optional[dict], generation: int) -> bool:
    """Whether the launcher already acted on a hang of run GENERATION (the attempt's META): it
    killed the run or cancelled the attempt (a cancel that failed is tried again; a record written
    before ``ended`` existed counts as acted on)."""
    h = (meta or {}).get(HANG_META) or {}
    return h.get("generation") == generation and h.get("ended", KILL) != ""


def no_process_reason(root: str, signal: str) -> str:
    """Why no process of a hung run is known (none registered a stack file, the only way the
    launcher finds them: ``launcher.jobside.stacks``), read from the spec: the checkpoint ROOT and
    the preemption SIGNAL (``recovery.signal``)."""
    if "://" in str(root):
        return (f"the checkpoint root {root} is not a POSIX path: the job side registers no stack file there, "
                "so no process of the run is known")
    if "USR2" in str(signal).upper():
        return ("recovery.signal is USR2: the preemption notice owns SIGUSR2, so the job side registered no "
                "stack file and no process of the run is known")
    return ("no process of the run registered a stack file: the program never loaded the job-side helper "
            "(launcher.jobside), or SIGUSR2 already had a handler")


def stack_files(names: Iterable[str]) -> list[tuple[str, int]]:
    """[(host, pid)] of the job side's stack files (``<host>.<pid>.txt``) among NAMES."""
    out = []
    for n in names:
        base = n.rsplit("/", 1)[-1]
        if not base.endswith(".txt"):
            continue
        host, _, pid = base[:-4].rpartition(".")
        if host and pid.isdigit():
            out.append((host, int(pid)))
    return sorted(out)


def meta_after(meta: Optional[dict], hang: Hang, *, in_job: bool, stacks: str, how: str, now: float,
               ended: str = KILL, no_stacks: str = "", not_killed: str = "") -> dict:
    """The attempt's meta once the launcher acted on HANG: ``hang`` counts the hangs of the attempt
    (a cancel tried again for the same run counts once), records the last, and says how its run was
    ENDED: ``killed``, the attempt's end is the hang's (the run's processes were killed and no in-job
    rerun follows); ``cancelled``, none could be killed (NOT_KILLED says why) and the attempt was
    cancelled through its backend, so its end (CANCELLED too) is the hang's; neither, not ended yet.
    NO_STACKS: why no stack was taken, when none was."""
    meta = dict(meta or {})
    prev = meta.get(HANG_META) or {}
    again = prev.get("generation") == hang.generation and prev.get("ended", KILL) == ""
    meta[HANG_META] = {"count": int(prev.get("count") or 0) + (0 if again else 1), "generation": hang.generation,
                       "step": hang.step, "age_s": round(hang.age_s, 1), "limit_s": round(hang.limit_s, 1),
                       "stacks": stacks, "stacks_by": how, "at": now, "ended": ended,
                       "killed": ended == KILL and not in_job, "cancelled": ended == CANCEL}
    if no_stacks and not stacks:
        meta[HANG_META]["no_stacks"] = no_stacks
    if not_killed:
        meta[HANG_META]["not_killed"] = not_killed
    return meta


def event_detail(attempt: int, hang: Hang, *, in_job: bool, stacks: str, how: str, pids: list,
                 ended: str = KILL, no_stacks: str = "", not_killed: str = "") -> dict:
    """The ``hang_detected`` event: the run, its last step and that step's age, where its stacks are
    (STACKS, collected HOW; else NO_STACKS, why none), its processes (PIDS) and how it is recovered
    (ENDED by a kill, or by a cancel through its backend because none could be killed: NOT_KILLED)."""
    if ended == CANCEL:
        recovery = f"cancel through its backend ({not_killed}), then resubmission (recovery.hang_restarts)"
    else:
        recovery = "in-job rerun" if in_job else "resubmission (recovery.hang_restarts)"
    out = {"attempt": attempt, "generation": hang.generation, "step": hang.step, "age_s": round(hang.age_s, 1),
           "limit_s": round(hang.limit_s, 1), "stacks": stacks, "stacks_by": how, "pids": pids, "recovery": recovery}
    if no_stacks and not stacks:
        out["no_stacks"] = no_stacks
    return out


def summary(meta: Optional[dict]) -> str:
    """One phrase for an attempt's hangs (its meta's ``hang``), or ''."""
    h = (meta or {}).get(HANG_META) or {}
    if not h:
        return ""
    if h.get("stacks"):
        where = f"; stacks in {h['stacks']}"
    else:
        where = "; no stacks collected" + (f" ({h['no_stacks']})" if h.get("no_stacks") else "")
    if h.get("cancelled"):
        where += f"; cancelled through its backend ({h.get('not_killed') or 'no process could be killed'})"
    elif h.get("ended") == "":
        where += f"; not ended yet ({h.get('not_killed') or 'no process could be killed'})"
    return (f"hung {h.get('count') or 1} time(s), the last with no step for {h.get('age_s')}s after step "
            f"{h.get('step')} (limit {h.get('limit_s')}s){where}")
