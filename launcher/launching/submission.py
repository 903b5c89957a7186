"""What launching and recovery share about one submission: its result (``Launched``), the
facts a render gets, the job's identity for an attempt, the dedupe lookup, and the spec a
job was launched with. Below both ``launch`` and ``launcher.sweep``, so neither imports
the other's internals."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from launcher.backend.protocols import ChoosesPlacement, ExcludesNodes, Handle, JobRef, Request, can
from launcher.core.errors import LauncherError
from launcher.spec.model import JobSpec, resolve_paths
from launcher.state.nodes import quarantined
from launcher.backend.context import AppContext
from launcher.backend.sections import spec_from_text
from launcher.plan import params_for, plan
from launcher.provenance.seed import with_run_env
from launcher.provenance.tracker_env import META_KEY as TRACKERS_META, with_tracker_env
from launcher.spec.secretenv import lift


# after a submission ended without the scheduler's answer, how long a job it may have made gets to
# show (a stalled controller takes in the requests queued at its socket once it runs again)
QUIET_S = 60.0


# meta key: when the scheduler last failed to answer a dedupe-token lookup of a job whose submission
# is unsettled (a launch's, a watcher's resubmission's, or one a cancel overtook). A stalled
# controller takes in the requests queued at its socket once it runs again, so "nothing ran" waits
# the quiet time from its return, not from the submission's end. One key for every such lookup.
UNANSWERED = "token_unanswered_at"


def note_unanswered(store, job_id: str, now: float) -> None:
    """The scheduler did not answer a dedupe-token lookup of JOB_ID at NOW (``UNANSWERED``)."""
    store.patch_meta(job_id, **{UNANSWERED: now})


def quiet_since(meta: dict, *times) -> float:
    """Pure: since when a submission of the job whose META this is, not at the scheduler, has
    been allowed to show: the latest of TIMES (the submission's end, a cancel) and the
    scheduler's last unanswered lookup (``UNANSWERED``)."""
    return max([float(t) for t in (*times, meta.get(UNANSWERED)) if t] or [0.0])


def earlier_unsettled(meta: dict, attempt: int, now: float, quiet_s: float = QUIET_S) -> str:
    """Pure: why ATTEMPT of a job whose META this is must not be submitted again yet, or "": an
    earlier submission of that attempt (``submit_unknown``, noted by ``launch.resubmit``) ended
    without the scheduler's answer, or the scheduler last failed to answer a lookup of it, less
    than QUIET_S ago, and its dedupe token is not at the scheduler yet (the caller looked)."""
    unknown = meta.get("submit_unknown") or {}
    if unknown.get("attempt") != attempt:
        return ""
    since = quiet_since(meta, unknown.get("at"))
    if now - since >= quiet_s:
        return ""
    return (f"attempt {attempt}'s last submission ended without the scheduler's answer {now - since:.0f}s ago "
            f"({unknown.get('reason') or 'outcome unknown'}); not submitting it again for {quiet_s - (now - since):.0f}s "
            "more, while the scheduler may still show it")

@dataclass
class Launched:
    job_id: str
    handle: Handle
    request: Request


def facts_for(app: AppContext, spec: JobSpec, target_name: str):
    """The target's probed facts, plus the planner's ranked placements for a backend that
    chooses among several (ChoosesPlacement: regions, clouds, spot or not)."""
    facts = app.facts(target_name)
    backend = app.backend(target_name)
    if not can(backend, ChoosesPlacement):
        return facts
    try:
        result = plan(spec, app.config, params_for(spec), targets=[target_name], store=app.store,
                      registry=app.registry)
    except LauncherError:
        return facts
    candidates = [row.placement() for row in result.ranked]
    if not candidates:
        return facts
    return backend.with_candidates(facts, candidates)


def new_job_ref(store, job_id: str, attempt: int = 1, **fields) -> JobRef:
    """The one place a submission's JobRef is made: JOB_ID's ATTEMPT with its job folder
    (made now, under the store's home) and FIELDS (seed, avoid, elements, sweep_id)."""
    return JobRef(job_id=job_id, attempt=attempt, job_dir=str(store.job_dir(job_id)), **fields)


def job_ref(app: AppContext, job_row, attempt: int, avoid=(), exclude_nodes=()) -> JobRef:
    return new_job_ref(app.store, job_row.job_id, attempt, avoid=tuple(avoid), exclude_nodes=tuple(exclude_nodes))


def excluded_nodes(app: AppContext, target_name: str, now: float) -> tuple:
    """The nodes quarantined on TARGET_NAME at NOW (``launcher.state.nodes``), which a submission
    there keeps off; () when its backend cannot exclude nodes (then there is none: a failure on
    such a backend's nodes quarantines nothing, ``launcher.launching.badnodes``)."""
    if not can(app.backend_class(target_name), ExcludesNodes):
        return ()
    return quarantined(app.store, target_name, now)


def find_submission(backend, job: JobRef) -> Optional[Handle]:
    """The scheduler's job carrying ``job``'s dedupe token, or None (``Backend.find``: a
    backend that cannot look it up answers None, and cannot dedupe)."""
    return backend.find(job)


def job_spec(job_row) -> JobSpec:
    """The spec a job was launched with, relative paths resolved as they were at launch. Pure:
    the values of secret-looking env a job recorded before they were kept out of the store still
    holds are ``stored_secrets``' (nothing is put into os.environ)."""
    spec = lift(spec_from_text(job_row.spec_yaml, job_row.spec_path or job_row.job_id))[0]
    base = job_row.meta.get("spec_base")
    spec = resolve_paths(spec, Path(base)) if base else spec
    # every submission of a job exports the same LAUNCHER_SEED (and LAUNCHER_FRESH: its first start starts over)
    return with_tracker_env(with_run_env(spec, job_row.meta.get("seed"), bool(job_row.meta.get("fresh"))),
                            job_row.meta)


def spec_inputs(job_row) -> tuple:
    """Everything ``job_spec`` reads of a row: two rows with equal inputs have equal specs."""
    meta = job_row.meta or {}
    return (job_row.spec_yaml, job_row.spec_path or job_row.job_id, meta.get("spec_base"), meta.get("seed"),
            bool(meta.get("fresh")), json.dumps(meta.get(TRACKERS_META), sort_keys=True, default=str))


class SpecMemo:
    """``job_spec`` for a watcher that reads the same open jobs pass after pass.

    Parsing and validating a stored spec is most of what an unchanged job costs a pass (about
    0.9 of its CPU at 1,000 RUNNING jobs, bench/state_engines.py), and a job's spec never
    changes while it is open. The memo keeps one parsed spec per job id, answered only while
    the row's ``spec_inputs`` are the ones it was parsed from (a relaunch, a new seed, ``--fresh``
    or trackers recorded later parse again); ``keep_only`` drops the jobs that are no longer
    open. Specs are frozen models, shared as they are. ``job_spec`` itself stays the plain
    version and the memo's test oracle (tests/unit/test_spec_memo.py)."""

    def __init__(self):
        self._by_job: dict[str, tuple[tuple, JobSpec]] = {}

    def spec(self, job_row) -> JobSpec:
        key = spec_inputs(job_row)
        known = self._by_job.get(job_row.job_id)
        if known is not None and known[0] == key:
            return known[1]
        spec = job_spec(job_row)
        self._by_job[job_row.job_id] = (key, spec)
        return spec

    def keep_only(self, job_ids) -> None:
        keep = set(job_ids)
        for job_id in [j for j in self._by_job if j not in keep]:
            del self._by_job[job_id]

    def __len__(self) -> int:
        return len(self._by_job)


def stored_secrets(job_row) -> dict:
    """{key: value} of the secret-looking env a job recorded before such values were kept out of
    the store still holds in its spec text (empty for any later job: its text has the placeholder).
    A resubmission gives them with its request (``with_secrets``); this process's environment wins."""
    return lift(spec_from_text(job_row.spec_yaml, job_row.spec_path or job_row.job_id))[1]


def with_secrets(request: Request, values: dict) -> Request:
    """REQUEST with secret VALUES given for its submission (``Request.secret_values``)."""
    return replace(request, secret_values={**request.secret_values, **values}) if values else request
