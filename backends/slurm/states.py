"""Pure parsers of Slurm's parsable text outputs, and the native -> JobState map.

Text formats (``scontrol -o show job``, ``squeue -o``, ``sacct -P``) are the
portable baseline: they read the same on 22.05 and 24.11, unlike ``--json``
(22.05's ``squeue --json`` ignores ``-j``/``-t``; ``scontrol --json`` is 23.02+). Where the
probe found ``scontrol --json``, json_status.py reads its records into the same values and
maps them with the same ``job_status`` / ``run_status``.
"""

from __future__ import annotations

import re
from typing import Optional

from launcher.core.exitcodes import explain
from launcher.core.status import JobState, Status

from launcher_backends.slurm.times import epoch

NATIVE = {
    "PENDING": JobState.PENDING, "CONFIGURING": JobState.PENDING, "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.COMPLETING, "COMPLETED": JobState.COMPLETED, "CANCELLED": JobState.CANCELLED,
    "FAILED": JobState.FAILED, "TIMEOUT": JobState.TIMEOUT, "DEADLINE": JobState.TIMEOUT,
    "NODE_FAIL": JobState.NODE_FAIL, "BOOT_FAIL": JobState.NODE_FAIL, "PREEMPTED": JobState.PREEMPTED,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY, "SUSPENDED": JobState.SUSPENDED, "STOPPED": JobState.SUSPENDED,
    "REQUEUED": JobState.REQUEUED, "REQUEUE_FED": JobState.REQUEUED, "REQUEUE_HOLD": JobState.REQUEUED,
    "RESIZING": JobState.RUNNING, "SIGNALING": JobState.RUNNING, "STAGE_OUT": JobState.COMPLETING,
    "SPECIAL_EXIT": JobState.FAILED, "REVOKED": JobState.CANCELLED, "RESV_DEL_HOLD": JobState.PENDING,
}

_KV = re.compile(r"([A-Za-z][\w:/]*)=(.*?)(?=\s+[A-Za-z][\w:/]*=|$)")


def parse_scontrol_oneliners(text: str) -> dict[str, dict]:
    """``scontrol -o show job [ID]`` -> {job_id: {Key: value}} (values may contain spaces)."""
    jobs = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("JobId="):
            continue
        fields = {m.group(1): m.group(2) for m in _KV.finditer(line)}
        jobs[fields["JobId"]] = fields
    return jobs


def _exit(v: Optional[str]) -> Optional[int]:
    """Slurm's ExitCode is 'rc:signal'; a signal death maps to 128+signal like a shell."""
    if not v or ":" not in v:
        return None
    rc, sig = v.split(":", 1)
    try:
        rc_i, sig_i = int(rc), int(sig)
    except ValueError:
        return None
    return 128 + sig_i if sig_i else rc_i


def _with_meaning(state: JobState, reason: str, code: Optional[int]) -> str:
    """A failed job's reason says what its exit status means ("NonZeroExitCode" alone does not)."""
    if state is not JobState.FAILED or not code:
        return reason
    return f"{reason}: {explain(code)}" if reason else explain(code)


def native_state(raw: str) -> str:
    # "CANCELLED by 0" (sacct), "CANCELLED+" (truncated) -> CANCELLED
    return raw.split()[0].rstrip("+") if raw else ""


def job_status(raw: str, reason: str, code: Optional[int], restarts: int, nodes: str, start: Optional[float],
               end: Optional[float], extra: dict) -> Status:
    """One job record of slurmctld (``scontrol -o show job`` or ``scontrol --json show job``,
    read into these values) -> Status: a requeued job waiting to run again is REQUEUED, a
    failure Slurm blames on memory OUT_OF_MEMORY, a failure's reason says what its code means."""
    state = NATIVE.get(raw, JobState.UNKNOWN)
    reason = "" if reason == "None" else reason
    if state is JobState.PENDING and restarts and reason in ("BeginTime", "JobHeldAdmin", "None", ""):
        # requeued (preemption, node failure or our own requeue) and waiting to start again
        state = JobState.REQUEUED
    if state is JobState.FAILED and reason == "OutOfMemory":
        state = JobState.OUT_OF_MEMORY
    return Status(state=state, native_state=raw, reason=_with_meaning(state, reason, code), exit_code=code,
                  nodes=nodes, restarts=restarts, start_time=start if raw != "PENDING" else None,
                  end_time=end if state.is_terminal else None, extra=extra)


def status_from_scontrol(f: dict) -> Status:
    nodes = f.get("NodeList", "") if f.get("NodeList") not in ("(null)", None) else ""
    return job_status(native_state(f.get("JobState", "")), f.get("Reason", ""), _exit(f.get("ExitCode")),
                      int(f.get("Restarts", "0") or 0), nodes, epoch(f.get("StartTime")),
                      epoch(f.get("EndTime")),
                      {"comment": f.get("Comment", ""), "partition": f.get("Partition", ""),
                       "requeue": f.get("Requeue", "")})


SACCT_FIELDS = "JobIDRaw,State,ExitCode,NodeList,Start,End,Reason,Comment,JobID"


def parse_sacct(text: str) -> dict[str, list[dict]]:
    """``sacct -n -P -o SACCT_FIELDS`` -> {job_id: [record per run, oldest first]} (steps skipped)."""
    names = SACCT_FIELDS.split(",")
    out: dict[str, list[dict]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < len(names) - 1:  # JobID, the last field, came later
            continue
        rec = dict(zip(names, parts))
        jid = rec["JobIDRaw"]
        if "." in jid:
            continue
        out.setdefault(jid, []).append(rec)
        task = rec.get("JobID", "")  # an array task also under <array>_<index> (a sweep element's handle)
        if "_" in task and "[" not in task and task != jid:
            out.setdefault(task, []).append(rec)
    return out


def run_status(raw: str, reason: str, code: Optional[int], nodes: str, start: Optional[float],
               end: Optional[float], restarts: int, runs: list) -> Status:
    """The last run of a finished job as accounting records it (``sacct``, ``sacct -c``,
    ``sacct --json``, read into these values) -> Status."""
    state = NATIVE.get(raw, JobState.UNKNOWN)
    reason = _with_meaning(state, "" if reason in ("None", None) else reason, code)
    return Status(state=state, native_state=raw, reason=reason, exit_code=code, nodes=nodes, restarts=restarts,
                  start_time=start, end_time=end, extra={"runs": runs})


def status_from_sacct(records: list[dict]) -> Status:
    last = records[-1]
    return run_status(native_state(last["State"]), last.get("Reason", "") or "", _exit(last.get("ExitCode")),
                      last.get("NodeList", ""), epoch(last.get("Start")), epoch(last.get("End")),
                      len(records) - 1, [r["State"] for r in records])


_PREEMPTED_LINE = re.compile(r"\*\*\* JOB \d+ ON (\S+) CANCELLED AT (\S+) DUE TO PREEMPTION")
_START_LINE = re.compile(r"^launcher: start \d+ of \S+ on (\S+) \(restart (\d+)\)", re.M)  # sbatch.sh.j2


def hostnames(expr: str) -> set:
    """A Slurm hostlist ("node[1-3,7],login") -> its names (one bracket level, as Slurm prints)."""
    names = set()
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?", expr or ""):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            names.add(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if lo.isdigit() and (not hi or hi.isdigit()):
                names |= {f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi or lo) + 1)}
    return names


# Accounting records a run when it ends, with the job's state at that moment: slurmdbd's sacct
# says REQUEUED for a run that ended in a requeue, but the jobcomp file (`sacct -c`, a cluster
# without slurmdbd) says PENDING, the state the requeue left the job in (measured on 22.05 for a
# job that requeued itself with `scontrol requeue` after a notice). A run that ended waiting is
# no such thing: it was requeued.
_WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "CONFIGURING", "RESV_DEL_HOLD"})


def run_state(state: str, ended: bool) -> str:
    """The state of one run of a job from its accounting record (STATE: sacct's ``State``, e.g.
    ``CANCELLED by 0``); ENDED: the record has an end. A run that ended in a waiting state is
    REQUEUED (see _WAITING); others as recorded (a run still queued or running too)."""
    name = (state or "").split()[0].rstrip("+") if (state or "").strip() else ""
    return "REQUEUED" if ended and name in _WAITING else name


def requeued_run(job: dict, down_text: str, log_text: str = "", window: float = 5) -> dict:
    """What ended a requeued job's last run, from what any user may read when Slurm keeps no
    accounting they can see (no slurmdbd; the jobcomp file is root-only). At a requeue
    slurmctld sets the job's SubmitTime to that second. A preempted run: slurmstepd wrote
    "*** JOB N ON NODE CANCELLED AT T DUE TO PREEMPTION ***" into the job's log at T, after
    that run's start line (or, with no start lines, within WINDOW of the requeue). A node
    failure: a node of that run (the job script's "launcher: start .. on NODES (restart R)"
    line) is DOWN, marked "Not responding" before the requeue (``sinfo -R -N -h -o
    '%H|%N|%E'``: up to SlurmdTimeout before, longer while slurmctld stalls); with no such
    line, a node marked in the requeue's second. Measured on 22.05 and 24.11.
    -> {"state": NODE_FAIL | PREEMPTED | REQUEUED, "nodes": ...}."""
    at = epoch(job.get("SubmitTime"))
    if at is None:
        return {"state": "REQUEUED", "nodes": ""}
    last_run = str(int(job.get("Restarts", "1") or 1) - 1)
    preempted_on = _preempted_in_run(log_text, last_run)
    if preempted_on:
        return {"state": "PREEMPTED", "nodes": preempted_on}
    for m in _PREEMPTED_LINE.finditer(log_text):
        t = epoch(m.group(2))
        if t is not None and abs(t - at) <= window:
            return {"state": "PREEMPTED", "nodes": m.group(1)}
    ran_on = [hostnames(m.group(1)) for m in _START_LINE.finditer(log_text) if m.group(2) == last_run]
    down = set()
    for line in down_text.splitlines():
        parts = line.split("|")
        t = epoch(parts[0].strip()) if len(parts) >= 2 else None
        node = parts[1].strip() if t is not None else ""
        if node and (node in ran_on[-1] and t <= at + window if ran_on else abs(t - at) <= window):
            down.add(node)
    if down:
        return {"state": "NODE_FAIL", "nodes": ",".join(sorted(down))}
    return {"state": "REQUEUED", "nodes": ""}


def _preempted_in_run(log_text: str, run: str) -> str:
    """The node of a preemption line the log holds inside run RUN (after that run's start
    line, before the next one's), else ''. The job's requeue can follow the line by more
    than the time window: a preempted task that saves on the notice ends seconds later
    (5 s measured for a sweep element on 22.05), and only then does slurmctld requeue it."""
    lines = sorted([(m.start(), "", m.group(2)) for m in _START_LINE.finditer(log_text)]
                   + [(m.start(), m.group(1), "") for m in _PREEMPTED_LINE.finditer(log_text)])
    current = None
    for _, node, started in lines:
        if not node:
            current = started
        elif current == run:
            return node
    return ""


def parse_version(text: str) -> tuple[int, int, int]:
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    if not m:
        raise ValueError(f"cannot read a Slurm version from {text!r}")
    return tuple(int(x) for x in m.groups())  # type: ignore[return-value]
