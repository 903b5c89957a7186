"""A sweep one job per element, on a backend that does not run arrays (``Scheduler.runs_arrays`` says no, or no
``Scheduler``; a backend that does: ``launcher.sweep.arrays``): every element is its own job, started one by one, and
the launcher keeps ``max_parallel``.

``launch_elements`` renders the first element (a render error records nothing), records
every element row (``<sweep id>-e<index>``, as on Slurm), submits element 0 (all-or-nothing:
its failure removes every row) and leaves the others QUEUED: held by the launcher, open, with
no attempt. ``fill`` starts queued elements as slots free (``launcher watch`` after each
refresh, ``launcher status SWEEP``, and the launch itself), lowest index first, so that at
most ``max_parallel`` elements are open past QUEUED (``separate.to_start``).

Exactly-once under any number of watchers: ``fill`` counts and starts only while holding the
SWEEP's claim (a row of the claims table keyed ``sweep:<id>``, taken and renewed like a job's
claim), and each element is started under its own job claim, only if it is still QUEUED (a
cancel takes that claim too). A start marks the row SUBMITTING before submitting, so a
launcher that dies mid-submit leaves a row that ``launcher watch`` adopts through its dedupe
token, like an interrupted launch. The start is marked (``meta["start_at"]``), and while its
lookup and submission run the starter keeps the element's claim alive (``launcher.state.claims``: renewed
every TTL/3, each renewal noted as ``meta["start_seen"]``), so a start slower than the claim's
TTL is never taken for a lost one. A start whose launcher died before the backend accepted it
(no job with its token once the element's claim is free and a claim's time has passed since
the starter was last seen) goes back to QUEUED, with a ``start_lost`` event, and counts as one
of the START_TRIES (``lost_start``).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

from launcher.backend.protocols import JobRef
from launcher.core.errors import LauncherError, SubmitOutcomeUnknown
from launcher.core.status import QUEUED
from launcher.launching.submission import Launched, facts_for, find_submission, job_spec, new_job_ref
from launcher.launching.launch import launch_owner
from launcher.launching.submit import (NewSubmission, claimed_start, fenced_submit, launch_alive,
                                      record_or_cancel, settle_unrecorded, starts_backend)
from launcher.recovery.policy import QUIET_S, reconcile_submitting
from launcher.provenance.seed import choose_seed
from launcher.provenance.trackers import attach_sweep as attach_trackers
from launcher.provenance.trackers import with_tracker_env
from launcher.recovery.cancel import CancelReport
from launcher.recovery.outcome import Outcome
from launcher.spec.secretenv import for_launch
from launcher.state.actors import actor
from launcher.state.claims import claim_ttl, claimed, kept_alive
from launcher.state.store import ClaimLost, is_open, new_job_id
from launcher.sweep.elements import begin_sweep, element_rows, sweep_rows
from launcher.sweep.separate import element_spec_of, to_start
from launcher.backend.context import AppContext

START_TRIES = 3  # a queued element whose submission failed this often is closed FAILED


# ---- the sweep's claim
def claim_key(sweep_id: str) -> str:
    return f"sweep:{sweep_id}"


def take_sweep_claim(store, sweep_id: str, ttl: Optional[float] = None) -> Optional[str]:
    """Take (or renew) the sweep's claim for TTL seconds: our owner name, or None when another
    launcher holds an unexpired one."""
    return store.claim_name(claim_key(sweep_id), ttl or claim_ttl())


@contextmanager
def sweep_claim(store, sweep_id: str) -> Iterator[Optional[str]]:
    owner = take_sweep_claim(store, sweep_id)
    try:
        yield owner
    finally:
        if owner is not None:
            store.release(claim_key(sweep_id), owner)


# ---- submitting one element as a job of its own
def element_job(app: AppContext, row, attempt: int = 1, avoid=()) -> JobRef:
    return new_job_ref(app.store, row.job_id, attempt, seed=row.meta.get("seed"), avoid=tuple(avoid))


def render_element(app: AppContext, row, attempt: int = 1, facts=None, avoid=(), target: Optional[str] = None):
    """The Request of element ROW as a single job (its own env, seed and root) on TARGET
    (default: the row's)."""
    target = target or row.target
    spec = element_spec_of(job_spec(row), row.meta["sweep"])
    facts = facts if facts is not None else facts_for(app, spec, target)
    return app.backend(target).render(spec, facts, element_job(app, row, attempt, avoid))


def resubmit_element(app: AppContext, row, target_name: str, attempt: int) -> tuple:
    """(lookup, submit) of element ROW's attempt ATTEMPT, a job of its own, for the submission protocol
    (``launcher.launching.submit.fenced_submit``): LOOKUP() finds an earlier try by its dedupe token, SUBMIT()
    submits the element's own spec (its env, seed and root) on TARGET_NAME."""
    backend = app.backend(target_name)
    alone = element_job(app, row, attempt)
    return (lambda: find_submission(backend, alone),
            lambda: backend.submit(render_element(app, row, attempt, target=target_name)))


def element_facts(app: AppContext, row):
    """The facts rendering element ROW on its target needs (the same for every element)."""
    return facts_for(app, element_spec_of(job_spec(row), row.meta["sweep"]), row.target)


def start_element(app: AppContext, row_id: str, facts=None) -> Outcome:
    """Start one QUEUED element, under its claim; anything else leaves it alone."""
    store = app.store
    with claimed(store, row_id) as c:
        if c is None:
            return Outcome(row_id, "claimed", "another launcher is acting on it")
        job = c.job
        if not is_open(job) or job.state != QUEUED:
            return Outcome(row_id, "claimed", f"no longer queued ({job.state})")
        store.patch_meta(row_id, start_at=time.time(), start_seen=None)  # before SUBMITTING: marks it a start
        store.update_job(row_id, state="SUBMITTING")
        backend = app.backend(job.target)
        try:
            with kept_alive(store, row_id, c.owner, claim_ttl(), _still_starting):  # a lookup or submit > TTL
                # the submission protocol (launcher.launching.submit): looked up, fenced by the claim
                handle, found = fenced_submit(store, backend, row_id, c.owner, lambda: _earlier_start(app, job),
                                              lambda: backend.submit(render_element(app, job, 1, facts)))
        except ClaimLost:
            raise
        except SubmitOutcomeUnknown as e:  # it may run: SUBMITTING, settled by its dedupe token
            store.mark_submit_unknown([row_id], str(e))
            return Outcome(row_id, "waiting", str(e))
        except LauncherError as e:
            return _start_failed(app, job, c.owner, e)
        why = "found by its dedupe token: an earlier start got through" if found else "a slot of max_parallel freed"
        try:
            store.record_submission(row_id, 1, job.target, handle.to_json(), handle.native_id, state="PENDING",
                                    reason=why, owner=c.owner, events=[("submitted", {
                                        "target": job.target, "native_id": handle.native_id, "attempt": 1,
                                        "sweep": job.meta["sweep"]["id"], "reason": why, "found_existing": found})])
        except ClaimLost:
            if not found:
                settle_unrecorded(store, backend, row_id, 1, handle)
            raise
    return Outcome(row_id, "started", f"{job.target} id {handle.native_id}")


def _still_starting(own_store, job_id: str) -> None:
    """A renewal of a start's claim: the starter is alive and still submitting (``start_seen``)."""
    own_store.patch_meta(job_id, start_seen=time.time())


def _earlier_start(app: AppContext, job):
    """The job an earlier start of element JOB submitted after all (a start whose launcher was
    lost, or one slower than its claim), found by its dedupe token; None on a first start."""
    if job.meta.get("start_at") is None:
        return None
    return find_submission(app.backend(job.target), element_job(app, job))


def _start_failed(app: AppContext, job, owner: str, e, event: str = "start_failed", **detail) -> Outcome:
    """One more failed start of JOB: back to QUEUED (with an EVENT), or closed FAILED at START_TRIES."""
    tries = int(job.meta.get("start_failures") or 0) + 1
    app.store.patch_meta(job.job_id, start_failures=tries)
    if tries >= START_TRIES:
        app.store.close_job(job.job_id, "FAILED", f"could not be started ({tries} tries): {e}", owner=owner,
                            event=event, detail={"error": str(e), "tries": tries, "final": True, **detail})
        return Outcome(job.job_id, "failed", str(e))
    app.store.update_job(job.job_id, state=QUEUED)
    app.store.record_event(job.job_id, event, error=str(e), tries=tries, **detail)
    return Outcome(job.job_id, event, f"{e} (back in the queue; try {tries} of {START_TRIES})")


# ---- a start whose launcher died (SUBMITTING, no handle, no job with its dedupe token)
@dataclass(frozen=True)
class LostStart:
    action: str  # "wait" | "requeue" | "fail"
    reason: str


def lost_start(age_s: float, ttl_s: float, tries: int, max_tries: int = START_TRIES) -> LostStart:
    """Pure: what to do with a queued element left SUBMITTING by a start the backend has no
    job of (looked up by its dedupe token), AGE_S after the starter's last sign of life (the
    start, or its latest claim renewal: a starter renews the element's claim, TTL_S, while it
    submits, however long that takes). Before TTL_S the submission may still be under way (a
    starter interrupted by Ctrl-C released the claim early); after it nothing ran: the element
    goes back to the queue, unless this was its last try (TRIES failed starts before this one)."""
    if age_s < ttl_s:
        return LostStart("wait", f"its starter was last seen {age_s:.0f}s ago and may still be submitting")
    why = (f"the launcher starting it stopped before the backend accepted it (no job with its dedupe token "
           f"{age_s:.0f}s after it was last seen submitting): nothing ran")
    return LostStart("fail" if tries + 1 >= max_tries else "requeue", why)


def started_at(job) -> Optional[float]:
    """When the start of queued element JOB began, if JOB is a row left SUBMITTING by one."""
    at = job.meta.get("start_at") if job.meta.get("sweep") else None
    return float(at) if at is not None and job.state == "SUBMITTING" and not job.handle else None


def last_seen(job) -> Optional[float]:
    """Pure: the last sign of life of the start of JOB (``started_at``, or the latest renewal
    of its claim recorded while it submitted, ``start_seen``); None when JOB is no such row."""
    at = started_at(job)
    seen = job.meta.get("start_seen")
    if at is None or not isinstance(seen, (int, float)):
        return at
    return max(at, float(seen))


def requeue_lost_start(app: AppContext, c, now: float) -> Optional[Outcome]:
    """Under the element's claim C: element C.job was left SUBMITTING by a start and the
    backend has no job of it (``lost_start``)."""
    job = c.job
    if claimed_start(app.store, job, 1, starts_backend(app, job.target)):  # it started after all: adopted by that trace
        return None
    unknown = job.meta.get("submit_unknown") or {}
    if unknown and now - float(unknown.get("at") or 0) < QUIET_S:
        return Outcome(job.job_id, "waiting", f"its start's outcome is unknown ({unknown.get('reason')}); waiting "
                                              "for the backend to show it")
    d = lost_start(now - last_seen(job), claim_ttl(), int(job.meta.get("start_failures") or 0))
    if d.action == "wait":
        return Outcome(job.job_id, "waiting", d.reason)
    return _start_failed(app, job, c.owner, d.reason, event="start_lost", reason=d.reason)


def requeue_lost_launch(app: AppContext, c, now: float) -> Optional[Outcome]:
    """Under the element's claim C: element C.job, submitted by its sweep's launch (element
    0), was left SUBMITTING and the backend has no job of it. Once the launch's submission is
    settled as "nothing ran" (``reconcile_submitting``: the launch is over and quiet, or its
    grace passed; no trace of a start) the element goes back into its queue, where ``fill``
    starts it as a slot frees, instead of being closed FAILED (a relaunch would run the whole
    sweep again). None: not such an element, or not settled yet (the reconciliation waits)."""
    job = c.job
    if job.meta.get("start_at") is not None or claimed_start(app.store, job, 1, starts_backend(app, job.target)):
        return None  # a start from the queue (``requeue_lost_start``), or it started after all
    alive = launch_alive(job.meta)
    if alive:
        return Outcome(job.job_id, "waiting", "its sweep's launch still runs")
    unknown = job.meta.get("submit_unknown") or {}
    r = reconcile_submitting(False, now - job.created, launch_over=bool(unknown) or alive is False,
                             quiet_s=now - float(unknown.get("at") or job.updated or job.created))
    if r.action != "fail":
        return None
    why = ("its sweep's launch ended before the backend accepted it (no job with its dedupe token, no trace "
           "of a start): nothing ran")
    return _start_failed(app, job, c.owner, why, event="start_lost", reason=why)


# ---- keeping max_parallel
def fill(app: AppContext, sweep_id: str, facts=None) -> list[Outcome]:
    """Start queued elements of SWEEP_ID while fewer than max_parallel hold a slot."""
    store = app.store
    if QUEUED not in {state for state, _ in store.sweeps.element_states(sweep_id).values()}:
        return []  # no row read in full: a status call of a sweep without queued elements
    with sweep_claim(store, sweep_id) as owner:
        if owner is None:
            return [Outcome(sweep_id, "claimed", "another launcher is starting its queued elements")]
        rows = sweep_rows(store, sweep_id)  # as of the claim: what other launchers started is counted
        by_index = {r.meta["sweep"]["index"]: r for r in rows}
        limit = job_spec(rows[0]).sweep.max_parallel
        picks = to_start([(i, r.state, is_open(r)) for i, r in by_index.items()], limit)
        if picks and facts is None:  # once per fill, not per element (a planner run on SkyPilot)
            facts = element_facts(app, by_index[picks[0]])
        out = []
        for i in picks:
            if take_sweep_claim(store, sweep_id) != owner:  # renewed per start: a slow backend
                out.append(Outcome(sweep_id, "claimed", "the sweep's claim was taken over"))
                break
            try:
                out.append(start_element(app, by_index[i].job_id, facts))
            except ClaimLost as e:  # its claim lapsed mid-start (this launcher was paused): settled
                out.append(Outcome(by_index[i].job_id, "claimed", str(e)))
                break
        return out


def fill_all(app: AppContext) -> list[Outcome]:
    """``launcher watch``'s hook: fill every sweep that has queued elements."""
    out = []
    for sweep_id in app.store.sweeps.queued(QUEUED):
        try:
            out += fill(app, sweep_id)
        except LauncherError as e:
            out.append(Outcome(sweep_id, "control_plane", str(e)))
    return out


# ---- launching and cancelling
def launch_elements(app: AppContext, spec, spec_text: str, spec_path: Optional[str], target_name: str, note=None):
    """Record every element, submit element 0 now (its failure records nothing), queue the
    rest and start as many as max_parallel allows. A ``Launched`` named by the sweep id."""
    spec, spec_text = for_launch(spec, spec_text)
    store, backend = app.store, app.backend(target_name)
    sweep_id = new_job_id(spec.name)
    seed, source = choose_seed(spec)
    rows = element_rows(sweep_id, spec, seed, os.path.dirname(spec_path) if spec_path else os.getcwd())
    attach_trackers(spec, sweep_id, rows, spec_path)  # each element's tracker runs, in its row's meta
    first = with_tracker_env(element_spec_of(spec, rows[0]["meta"]["sweep"]), rows[0]["meta"])
    facts = facts_for(app, first, target_name)  # once per sweep
    job0 = new_job_ref(store, rows[0]["job_id"], seed=rows[0]["meta"]["seed"])
    request = backend.render(first, facts, job0)  # errors: nothing recorded yet
    limit = spec.sweep.max_parallel
    if note:
        note(f"sweep {sweep_id}: {len(rows)} elements as separate jobs, at most {limit or len(rows)} at once "
             f"(LAUNCHER_SWEEP_SEED {rows[0]['meta']['sweep']['seed']}, {source})")
    rows[0]["meta"]["launch_by"] = launch_owner()  # watch asks whether the launch lives (``requeue_lost_launch``)
    with store.batch():  # the spec once, element 0 SUBMITTING, the others QUEUED: a launch killed
        # from here on leaves every element either submitted or waiting, never lost
        begin_sweep(store, sweep_id, spec, spec_text, spec_path, target_name, backend.name, rows)
        queue_rows(store, [r["job_id"] for r in rows[1:]], f"waits for a slot (max_parallel {limit})")
    # the submission protocol (launcher.launching.submit): a rejection removes the sweep, an
    # unknown outcome keeps element 0 SUBMITTING for watch to settle by its dedupe token
    handle, _ = NewSubmission(store, backend, request, [job0.job_id], lambda: store.sweeps.forget(sweep_id)).run()
    submitted = [("submitted", {"target": target_name, "native_id": handle.native_id, "attempt": 1, "sweep": sweep_id})]
    if not record_or_cancel(store, backend, job0.job_id, handle, lambda: store.record_submission(
            job0.job_id, 1, target_name, handle.to_json(), handle.native_id, state="PENDING", events=submitted)):
        if note:  # cancel won: what was submitted is cancelled (the other elements: as the cancel left them)
            note(f"sweep {sweep_id}: element 0 was cancelled while it was being launched; what the launch submitted "
                 f"({backend.name} id {handle.native_id}) was cancelled")
    fill(app, sweep_id, facts)
    return Launched(sweep_id, handle, request)


def queue_rows(store, job_ids: list, reason: str) -> None:
    """Rows just recorded as SUBMITTING become QUEUED (one transaction), each with an event."""
    store.set_waiting(job_ids, QUEUED, reason, "queued")


def cancel_queued(app: AppContext, sweep_id: str, wait_s: float = 30.0, poll: float = 0.2) -> list:
    """Close every QUEUED element of SWEEP_ID as CANCELLED before it starts (under the sweep's
    claim, so no launcher starts one meanwhile). A ``launcher.recovery.cancel.CancelReport`` each."""
    store, deadline = app.store, time.monotonic() + wait_s
    while True:
        with sweep_claim(store, sweep_id) as owner:
            if owner is not None:
                return [r for r in (_cancel_one_queued(store, row.job_id, CancelReport)
                                    for row in sweep_rows(store, sweep_id) if row.state == QUEUED) if r]
        if time.monotonic() > deadline:
            raise LauncherError(f"sweep {sweep_id} is being acted on by another launcher; nothing was "
                                "cancelled: try again in a minute")
        time.sleep(poll)


def cancel_queued_element(app: AppContext, job_id: str):
    """Close element JOB_ID as CANCELLED if it is still QUEUED (a CancelReport), else None."""
    return _cancel_one_queued(app.store, job_id, CancelReport)


def _cancel_one_queued(store, job_id: str, report_cls):
    with claimed(store, job_id) as c:
        if c is None or not is_open(c.job) or c.job.state != QUEUED:
            return None  # being started, or closed: the ordinary cancel takes it from here
        note = "queued by the launcher: it never started"
        who = actor(store)  # the role or user cancelling (launcher.state.actors)
        store.close_job(job_id, "CANCELLED", f"cancelled by {who}", owner=c.owner, event="cancelled",
                        detail={"by": who, "note": note})
        return report_cls(job_id, note=note)
