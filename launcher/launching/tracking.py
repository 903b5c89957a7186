"""Tracking jobs: one batched status call per target brings the state store up to date.

``refresh`` is what ``launcher status``, ``launcher watch`` and ``launch --follow`` read
the scheduler through: it records each attempt's state, reason, times and cost, mirrors
the current attempt's state on its (open) job, and turns a restart in place (a Slurm
requeue under the same native id) into a new attempt row.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional

from launcher.backend.protocols import Handle, Scheduler, can
from launcher.core.errors import LauncherError
from launcher.core.status import Status
from launcher.launching import badnodes
from launcher.launching.polling import ask_targets
from launcher.backend.context import AppContext


def refresh(app: AppContext, jobs, recorded=None, poller=None) -> dict:
    """One batched status call per target for the given job rows; updates the store.

    Returns {job_id: Status} (a job a poller's snapshot does not hold yet is left out: that
    poller reads it at its next pass). A failing target is reported per job as an error string,
    never turned into a job failure (that is a CONTROL_PLANE event). RECORDED(row, status):
    True when the store already holds that status of that job (``launcher watch``: its mark
    says so), which is then not compared or written again. POLLER: the watcher's part in the
    election of one poller per target (``launcher.launching.polling``); without it, every
    target is asked.
    """
    by_target: dict[str, list] = {}
    for j in jobs:
        if j.handle:
            by_target.setdefault(j.target, []).append((j, Handle.from_json(j.handle)))
    answers = ask_targets(app.store, by_target, lambda target, handles: app.backend(target).status(handles), poller)
    out: dict = {}
    for target, pairs in by_target.items():
        statuses = answers[target]
        if isinstance(statuses, LauncherError):
            for r, _ in pairs:
                out[r.job_id] = statuses
            continue
        # the attempts of the jobs restarted in place only (a restart count of 0 never makes a new attempt)
        known = app.store.bulk.attempts_of([r.job_id for (r, _), st in zip(pairs, statuses) if st and st.restarts])
        entries = []
        for (r, h), st in zip(pairs, statuses):
            if st is None:  # not in the poller's snapshot yet: its next pass reads it
                continue
            assert isinstance(st, Status)
            out[r.job_id] = st
            if recorded is not None and recorded(r, st):
                continue
            # may ask the scheduler for the run history: before the write lock is taken
            entries.append(status_entry(r, h, _follow_restarts(app, r, h, st, known.get(r.job_id)), st))
        if entries:
            app.store.bulk.record_statuses(entries)  # one transaction for every row of this status call
    return out


def status_entry(r, h0: Handle, h: Handle, st) -> tuple:
    """Pure: what ``StateStore.record_statuses`` writes for one row: its attempt's state,
    reason, times and cost, and the state mirrored on the job (while it is open)."""
    fields = dict(state=st.state.value, reason=st.reason, native_state=st.native_state, exit_code=st.exit_code)
    if st.start_time:
        fields["started"] = st.start_time
    if st.end_time:
        fields["ended"] = st.end_time
    cost = attempt_cost(h, st)
    if cost is not None:
        fields["cost_usd"] = cost
    # an open job shows its current attempt; a closed one keeps the state and reason of
    # the decision that closed it (state.is_open is the one definition)
    return r.job_id, h.attempt, fields, r.handle if h is h0 else h.to_json(), st.state.value, st.reason


def attempt_cost(h: Handle, st, now: Optional[float] = None) -> Optional[float]:
    """$ spent by one attempt so far: the launched resources' hourly price (the backend's
    actual figure when it reports one, else the estimate recorded at submit) times the
    time it has held them."""
    hourly = st.extra.get("hourly_usd") or h.extra.get("hourly_usd")
    start = st.start_time or st.extra.get("launched_at")
    if not hourly or not start:
        return None
    end = st.end_time or (now if now is not None else time.time())
    return round(float(hourly) * max(0.0, end - start) / 3600.0, 6)


def restarted_run(run: dict, backend: str, n: int) -> dict:
    """Pure: the fields of attempt N's row once its scheduler restarted it in place as attempt
    N + 1. RUN: that run's record in the scheduler's per-run history ({} when it keeps none):
    how it ended (REQUEUED when the record does not say) and, where the record dates it, when it
    started and ended, so every view shows the run over (not a row still waiting or running)."""
    fields = dict(state=run.get("state") or "REQUEUED", reason=f"restarted by {backend} as attempt {n + 1}",
                  native_state=run.get("state", ""))
    for key, col in (("start", "started"), ("end", "ended")):
        t = run.get(key)
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            fields[col] = float(t)
    return fields


def _follow_restarts(app: AppContext, row, h: Handle, st, attempts=None) -> Handle:
    """A scheduler that restarts a job in place (Slurm requeue) keeps its native id: each
    restart becomes a new attempt row, and the finished run's own state (PREEMPTED,
    NODE_FAIL ...) is taken from the scheduler's per-run history where it keeps one."""
    if not st.restarts:  # the first run of its native id: the attempt it was submitted as
        return h
    attempts = app.store.attempts(row.job_id) if attempts is None else attempts  # ATTEMPTS: as read before
    same = [a for a in attempts if a.native_id == h.native_id]
    if not same:
        return h
    first = min(a.attempt for a in same)
    current = first + st.restarts
    if current <= h.attempt:
        return h
    history = []
    backend = app.backend(row.target)
    if can(backend, Scheduler):
        try:
            history = backend.run_history(h)
        except LauncherError:
            history = []
    for n in range(h.attempt, current):
        run = history[n - first] if n - first < len(history) else {}
        app.store.update_attempt(row.job_id, n, **restarted_run(run, h.backend, n))
        nh = dataclasses.replace(h, attempt=n + 1)
        if app.store.add_restart(row.job_id, n + 1, row.target, nh.to_json(), h.native_id, st.state.value,
                                 st.reason):  # another watcher may have recorded this restart already
            app.store.record_event(row.job_id, "restarted", attempt=n + 1,
                                   previous=run.get("state") or "REQUEUED", nodes=run.get("nodes", ""))
            # a run that ended NODE_FAIL blames its nodes (docs/bad-nodes.md), as an attempt that ended does
            for kind, detail in badnodes.blame_run(app, row, n, run, time.time()):
                app.store.record_event(row.job_id, kind, **detail)
        h = nh
    return h


def wait_for(app: AppContext, job_id: str, poll: float = 1.0, timeout: Optional[float] = None):
    deadline = None if timeout is None else time.time() + timeout
    while True:
        row = app.store.get_job(job_id)
        st = refresh(app, [row]).get(job_id)
        if st is not None and not isinstance(st, Exception) and st.state.is_terminal:
            return st
        if deadline and time.time() > deadline:
            raise LauncherError(f"timed out waiting for {job_id}")
        time.sleep(poll)
