"""The rows the state store returns, as plain frozen data, and the pure rules over them.

A job's ``meta`` is a JSON object: the launch's own keys (``spec_base``, ``seed`` ...) and
recovery's (``launcher.recovery.state.RecoveryState`` reads and writes those, typed). The store
itself knows four of recovery's keys, by name only, because it acts on them inside its own
transactions: a job closed by a decision (``CLOSED_KEY``), its scheduled retry
(``RETRY_KEY``), a burst race whose first running copy wins (``BURST_KEY``), and a hung
attempt the launcher cancelled to recover it (``HANG_CANCEL_KEY``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from launcher.core.status import is_final, job_state_for

CLOSED_KEY = "final"  # the name earlier versions wrote; recovery's ``closed``
RETRY_KEY = "retry_at"
BURST_KEY = "burst"
# {"attempt": N, "handle": the job's handle then}: the launcher cancelled that hung attempt through
# its backend because none of its processes could be killed (launcher.recovery.hang); its CANCELLED
# end is no user's cancel: it keeps the job open for the decision (a HANG, recovery.hang_restarts)
HANG_CANCEL_KEY = "hang_cancel"


def patched(meta: dict, changes: dict) -> dict:
    """META with CHANGES applied (a None value removes the key)."""
    out = dict(meta)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def meta_closed(meta: dict) -> bool:
    """Was the job closed by a decision (its row may still show the attempt's state)?"""
    return bool(meta.get(CLOSED_KEY))


def meta_racing(meta: dict) -> bool:
    """Is a burst race deciding which copy of the job wins?"""
    burst = meta.get(BURST_KEY)
    return isinstance(burst, dict) and burst.get("phase") == "racing"


def meta_hang_cancelled(meta: dict, handle_json: str) -> bool:
    """Did the launcher cancel the submission HANDLE_JSON after a hang (``HANG_CANCEL_KEY``)?"""
    mark = meta.get(HANG_CANCEL_KEY)
    return isinstance(mark, dict) and mark.get("handle") == handle_json


def closed_meta(meta: dict) -> dict:
    """META of a job closed by a decision: no retry is pending any more."""
    return patched(meta, {CLOSED_KEY: True, RETRY_KEY: None})


def reopened_meta(meta: dict) -> dict:
    """META of a closed job opened again (a recorded submission is the truth)."""
    return patched(meta, {CLOSED_KEY: None})


def is_open(job: "JobRow") -> bool:
    """The one definition of an open job. A job closed by an older version may still show
    the attempt's state (PREEMPTED ...): its recovery state says it is closed."""
    return not is_final(job.state) and not meta_closed(job.meta)


def job_step(job: "JobRow") -> Optional[int]:
    """THE step of a job, wherever it is shown (``status``, ``status SWEEP``, ``report``,
    ``report SWEEP``, ``serve`` and the API): its row's last committed step. Every reader that
    may write brings it up to date from the checkpoint root first
    (``launcher.recovery.progress.record_progress``) and then shows the row, so two views of one
    job never give two steps. A step a program reported with its metrics is shown beside that
    metric ("at step N"), never as the job's step."""
    return job.last_step


RESUME_TIER_KEY = "resume_tier"  # an attempt's meta: the tier its checkpoint was restored from


def resume_words(step: Optional[int], tier: Optional[str] = None) -> str:
    """THE words for where an attempt resumed, wherever a resume is shown (``status``, ``report``,
    its plot, ``serve``): "from step 120 (peer)" (the tier its checkpoint was restored from: local,
    peer or durable, ``launcher.checkpoint.tiers``; left out when none was recorded), "fresh start"
    (step -1: no checkpoint), "-" (not known). STEP and TIER are its generation's record's."""
    if step is None:
        return "-"
    if step < 0:
        return "fresh start"
    return f"from step {step}" + (f" ({tier})" if tier else "")


def attempt_resume_words(attempt: "AttemptRow") -> str:
    """``resume_words`` of an attempt as the store holds it (its tier in its meta, copied there
    from its GENERATIONS.json record by ``launcher.recovery.progress``)."""
    return resume_words(attempt.resume_step, (attempt.meta or {}).get(RESUME_TIER_KEY))


def claim_available(holder: Optional[str], expires: Optional[float], me: str, now: float) -> bool:
    """Pure: may ``me`` take a job's claim held by ``holder`` until ``expires``?"""
    return holder is None or holder == me or expires is None or expires <= now


def mirrored_state(row, handle_json: str, state: str) -> Optional[str]:
    """Pure: the job state ``mirror_state`` writes for an attempt's STATE, given the job's ROW
    (state, handle, meta as stored), or None when the row keeps its own (gone, superseded by a
    newer submission, closed, a burst race deciding first which copy won, or a hung attempt the
    launcher cancelled itself, whose end recovery decides on)."""
    if row is None or row["handle"] != handle_json or is_final(row["state"]):
        return None
    text = row["meta"] or "{}"
    # only a meta naming a closing, a burst race or a hang's cancel is parsed (1,000 sweep elements a poll)
    marks = (CLOSED_KEY, BURST_KEY, HANG_CANCEL_KEY)
    meta = json.loads(text) if any(f'"{k}"' in text for k in marks) else {}
    if meta_closed(meta):
        return None
    new = job_state_for(state)
    if new == "CANCELLED" and meta_hang_cancelled(meta, handle_json):
        return None  # the launcher's own cancel of a hung attempt: recovery decides (launcher.recovery.hang)
    return None if is_final(new) and meta_racing(meta) else new


@dataclass(frozen=True)
class JobRow:
    job_id: str
    name: str
    target: str
    backend: str
    spec_path: Optional[str]
    spec_yaml: str
    created: float
    updated: float
    state: str
    reason: str
    handle: Optional[str]
    ckpt_root: Optional[str]
    last_step: Optional[int]
    meta: dict
    sweep_id: Optional[str] = None  # the sweep this job is an element of (``launcher.state.sweeps``)
    owner: Optional[str] = None  # the role that created it, on a team's PostgreSQL store (``launcher.state.team``)


# the tail of an INSERT INTO attempts(job_id, attempt, target, native_id, handle, submitted, state, reason,
# resume_step, meta): an attempt recorded again (its submission repeated) is that submission's alone,
# every column it does not give back at its default (nothing of the earlier record's run is kept)
ATTEMPT_REPLACED = ("ON CONFLICT (job_id, attempt) DO UPDATE SET target=excluded.target, "
                    "native_id=excluded.native_id, handle=excluded.handle, submitted=excluded.submitted, "
                    "state=excluded.state, reason=excluded.reason, resume_step=excluded.resume_step, "
                    "meta=excluded.meta, native_state='', exit_code=NULL, started=NULL, ended=NULL, cost_usd=NULL")


@dataclass(frozen=True)
class AttemptRow:
    job_id: str
    attempt: int
    target: str
    native_id: Optional[str]
    handle: Optional[str]
    submitted: float
    state: str
    reason: str
    native_state: str
    exit_code: Optional[int]
    started: Optional[float]
    ended: Optional[float]
    resume_step: Optional[int]
    cost_usd: Optional[float]
    meta: dict


def reopened(metas: dict) -> dict:
    """{job id: meta text} of the jobs closed meanwhile (METAS: {job id: meta text}), reopened:
    a recorded submission is the truth (as ``record_attempt`` does). Only a meta that names
    the closing key is parsed."""
    out = {}
    for job_id, text in metas.items():
        if text and f'"{CLOSED_KEY}"' in text:
            meta = json.loads(text)
            if meta_closed(meta):
                out[job_id] = json.dumps(reopened_meta(meta))
    return out
