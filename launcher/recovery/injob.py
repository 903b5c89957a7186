"""In-job restarts (``recovery.in_job``) as the launcher sees them (pure): the job script
reruns a failed step inside its allocation and records each rerun as a new generation whose
GENERATIONS.json record carries ``in_job`` (launcher.jobside.injob). Here they are matched
to the launcher's attempts (each rerun belongs to the attempt whose run it restarted) and
turned into events for ``launcher status``.
"""

from __future__ import annotations

from typing import Iterable

from launcher.recovery.takeover import attempt_records, own_records

EVENT = "in_job_restart"


def restarts_by_attempt(job_id: str, attempts: Iterable[int], history: Iterable[dict]) -> dict[int, list[dict]]:
    """{attempt: its in-job restart records, oldest first}: a restart belongs to the attempt of
    the generation it restarted (``in_job.previous_generation``), followed back to the
    attempt's first start."""
    history = list(history)
    firsts = [h for h in history if not isinstance(h.get("in_job"), dict)]
    attempt_of = {h["generation"]: a for a, h in attempt_records(job_id, attempts, firsts).items()}
    out: dict[int, list[dict]] = {}
    mine = own_records(job_id, history)
    for h in mine:
        ij = h.get("in_job")
        if not isinstance(ij, dict):
            continue
        a = attempt_of.get(ij.get("previous_generation"))
        if a is None:
            continue
        attempt_of[h["generation"]] = a
        out.setdefault(a, []).append(h)
    for h in mine:  # torchft: a replica group restarted alone, in its generation (``rejoins``)
        a = attempt_of.get(h.get("generation"))
        if a is not None:
            out.setdefault(a, []).extend(rejoin_records(h))
    for recs in out.values():
        recs.sort(key=lambda r: str(r["in_job"].get("failed_at") or ""))
    return out


def rejoin_records(h: dict) -> list[dict]:
    """Generation record H's restarts inside its run (``rejoins``: a torchft replica group restarted
    alone, written by ``in-job-restart --rejoin-group``; NVRx's in-process restarts, by
    ``jobside.restarted_in_process``), each shaped as an in-job restart record of H's generation."""
    out = []
    for r in h.get("rejoins") or []:
        if isinstance(r, dict):
            out.append({"generation": h.get("generation"), "rejoin": True,
                        "in_job": {"restart": r.get("restart"), "exit": r.get("exit"), "failed_at": r.get("failed_at"),
                                   "group": r.get("group"), "kind": r.get("kind"), "reason": r.get("reason"),
                                   "previous_generation": h.get("generation")}})
    return out


def event_detail(attempt: int, h: dict) -> dict:
    """The ``in_job_restart`` event of restart record H of ATTEMPT."""
    ij = h["in_job"]
    step = h.get("resume_step")
    out = {"attempt": attempt, "restart": ij.get("restart"), "exit": ij.get("exit"),
           "failed_at": ij.get("failed_at"), "generation": h.get("generation"),
           "resume_step": step if isinstance(step, int) and step >= 0 else None,
           "resume_tier": h.get("resume_tier")}
    if h.get("rejoin") and ij.get("kind") == "in_process":  # NVRx restarted the ranks in their processes
        out.update(how="in_process", reason=ij.get("reason"))  # not "kind": that is the event's own
    elif h.get("rejoin"):  # one replica group restarted alone and healed from the others: no resume
        out["group"] = ij.get("group")
    return out


def summary(meta: dict) -> str:
    """One phrase for an attempt's in-job restarts (its meta's ``in_job``), or ''."""
    ij = (meta or {}).get("in_job") or {}
    n = ij.get("restarts") or 0
    if not n:
        return ""
    if ij.get("how") == "in_process":
        return f"{n} in-job restart(s), the last inside the run's processes (NVRx)"
    if ij.get("group") is not None:
        return (f"{n} in-job restart(s), the last of replica group {ij['group']} alone after exit "
                f"{ij.get('last_exit')}, healed from the groups that went on")
    step = ij.get("last_resume_step")
    return (f"{n} in-job restart(s), the last after exit {ij.get('last_exit')}, resuming from "
            f"{'a fresh start' if step is None else f'step {step}'}")
