"""What the launcher knows about a job's progress, read from its checkpoint root:
the newest committed step, and the step each generation (attempt) resumed from.

Reading a checkpoint root is I/O on storage the launcher does not control: a hung NFS
mount, an S3 endpoint that accepts and never answers. ``read_progress`` therefore runs
the read on a daemon thread and returns within TIMEOUT seconds, with ``unknown`` set and
the reason, so one job's storage never stops ``launcher watch`` from recovering the
others. A read still hung from an earlier call is not started again: the next call for
that root returns "unknown" at once until it finishes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from launcher.core import knobs
from launcher.recovery import injob, takeover
from launcher.backend.context import AppContext
from launcher.checkpoint import CheckpointError, latest, open_store, read_generations
from launcher.state.rows import RESUME_TIER_KEY

DEFAULT_TIMEOUT_S = 20.0  # $LAUNCHER_STORAGE_TIMEOUT overrides


@dataclass(frozen=True)
class Progress:
    committed_step: Optional[int] = None
    resume_steps: dict = field(default_factory=dict)  # generation -> resume step (None: fresh start)
    error: str = ""
    unknown: bool = False  # the read did not finish in time: nothing is known, decide nothing from it
    history: tuple = ()  # GENERATIONS.json history records (job id, attempt, resume step of every start)
    committed_bytes: Optional[int] = None  # the committed checkpoint's size, from its manifest's files

    def resume_of(self, generation: int) -> Optional[int]:
        return self.resume_steps.get(generation)


def default_timeout() -> float:
    return knobs.number("LAUNCHER_STORAGE_TIMEOUT", DEFAULT_TIMEOUT_S, positive=True)


_inflight: dict = {}  # root -> (thread, started monotonic)
_lock = threading.Lock()


def read_progress(root: Optional[str], timeout: Optional[float] = None) -> Progress:
    """The job's progress under ROOT, within TIMEOUT seconds (default
    $LAUNCHER_STORAGE_TIMEOUT or 20 s). Never raises for storage trouble: a failed read
    sets ``error``; a read that did not finish in time also sets ``unknown``."""
    if not root:
        return Progress()
    timeout = default_timeout() if timeout is None else float(timeout)
    with _lock:
        prev = _inflight.get(root)
        if prev is not None and prev[0].is_alive():
            return Progress(error=f"still waiting for a read of {root} started {time.monotonic() - prev[1]:.0f}s "
                                  f"ago (storage hung?)", unknown=True)
        box: dict = {}
        t = threading.Thread(target=_run, args=(root, box), name=f"launcher-progress:{root}", daemon=True)
        _inflight[root] = (t, time.monotonic())
        t.start()
    t.join(timeout)
    if t.is_alive():
        return Progress(error=f"no answer from {root} within {timeout:g}s (hung NFS mount or S3 endpoint?); "
                              f"progress unknown", unknown=True)
    with _lock:
        if _inflight.get(root, (None,))[0] is t:
            del _inflight[root]
    return box.get("result") or Progress(error="progress read ended without a result")


def _run(root: str, box: dict) -> None:
    try:
        box["result"] = read_progress_now(root)
    except BaseException as e:  # never let a thread die silently: report it as the result
        box["result"] = Progress(error=f"{type(e).__name__}: {e}")


def read_progress_now(root: str) -> Progress:
    """The unbounded read (blocks as long as the storage does)."""
    try:
        store = open_store(root)
        gens = read_generations(store)
        found = latest(store, gens=gens)
    except (CheckpointError, OSError) as e:
        return Progress(error=f"{type(e).__name__}: {e}")
    resumes = {}
    for h in gens.history:
        g, s = h.get("generation"), h.get("resume_step")
        if isinstance(g, int):
            resumes[g] = None if not isinstance(s, int) or s < 0 else s
    return Progress(committed_step=found.step if found else None, resume_steps=resumes,
                    history=tuple(h for h in gens.history if isinstance(h, dict)),
                    committed_bytes=manifest_bytes(getattr(found, "manifest", None)) if found else None)


def manifest_bytes(manifest) -> Optional[int]:
    """The sum of the sizes a checkpoint's manifest lists; None without a manifest."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        return None
    return sum(int(f.get("size") or 0) for f in manifest["files"] if isinstance(f, dict))


@dataclass(frozen=True)
class ProgressWrites:
    """What a progress read changes in the store: the job's last committed step (None: unchanged)
    and, per attempt, the fields of its row that the checkpoint root's history corrects."""

    last_step: Optional[int] = None
    attempts: tuple = ()  # (attempt number, {column: value}), in attempt order
    events: tuple = ()  # (kind, {detail}) to record: each in-job restart not recorded yet (recovery.in_job)

    def __bool__(self) -> bool:
        return self.last_step is not None or bool(self.attempts) or bool(self.events)


def progress_writes(job, attempts, progress: Progress) -> ProgressWrites:
    """Pure: what PROGRESS (read from JOB's checkpoint root) changes in the store, given the job
    row and its ATTEMPTS as stored: its last committed step; the step each attempt ACTUALLY
    resumed from (its generation's record in GENERATIONS.json, matched by job id and attempt);
    the tier each resumed from (local, peer, durable: ``launcher.checkpoint.tiers``); and the
    reruns of its step inside its allocation (recovery.in_job) not recorded yet: one
    ``in_job_restart`` event each, and the attempt's count of them (its meta's ``in_job``)."""
    if progress.error:
        return ProgressWrites()
    step = progress.committed_step
    last_step = step if step is not None and step != job.last_step else None
    numbers = [a.attempt for a in attempts]
    resumes = takeover.resume_steps(job.job_id, numbers, progress.history)
    records = takeover.attempt_records(job.job_id, numbers, progress.history)
    in_job = injob.restarts_by_attempt(job.job_id, numbers, progress.history)
    changed, events = [], []
    for a in attempts:
        fields = {}
        meta = dict(a.meta or {})
        if a.attempt in resumes and resumes[a.attempt] != a.resume_step:
            fields["resume_step"] = resumes[a.attempt]
        tier = (records.get(a.attempt) or {}).get("resume_tier")
        if tier and meta.get(RESUME_TIER_KEY) != tier:
            meta[RESUME_TIER_KEY] = tier
        recs = in_job.get(a.attempt) or []
        known = (meta.get("in_job") or {}).get("restarts") or 0
        if len(recs) > known:
            events += [(injob.EVENT, injob.event_detail(a.attempt, h)) for h in recs[known:]]
            last = injob.event_detail(a.attempt, recs[-1])
            meta["in_job"] = {"restarts": len(recs), "last_exit": last["exit"],
                              "last_resume_step": last["resume_step"], "last_at": last["failed_at"],
                              **{k: last[k] for k in ("group", "how") if k in last}}
        if meta != (a.meta or {}):
            fields["meta"] = meta
        if fields:
            changed.append((a.attempt, fields))
    return ProgressWrites(last_step, tuple(changed), tuple(events))


def record_progress(app: AppContext, job, progress=None, attempts=None) -> None:
    """Copy the checkpoint root's facts into the state store, where `launcher status` shows
    them (``progress_writes``), in one transaction, and none when nothing changed. PROGRESS:
    the root as already read (else it is read now); ATTEMPTS: the job's attempts as already
    read (a watch's claim), else they are read."""
    if not job.ckpt_root:
        return
    progress = progress or read_progress(job.ckpt_root)
    if progress.error:
        return
    writes = progress_writes(job, app.store.attempts(job.job_id) if attempts is None else attempts, progress)
    if writes:
        app.store.write_progress(job.job_id, writes.last_step, writes.attempts, writes.events)
