"""``launcher watch``: the recovery loop over every open job.

Each cycle first reconciles job rows left in SUBMITTING (a launch that died between the
scheduler's accept and the state write), then, for every open job: refresh (one batched
status call per target, ``launcher.launching.tracking``) -> decide (pure, ``launcher.recovery.decide``,
on the job's typed ``RecoveryState``, its status and the clock) -> apply (here: resubmit
after its delay, close the job with the reason, record what was learned).

Exactly-once under any number of watchers and crashes: the decide -> submit -> record
step for a job runs only while holding the job's claim, taken in the same transaction
that reads the job and its attempts (so the decision sees what other watchers did), and
the attempt is recorded only while the claim is still ours. A watcher that dies
mid-submit leaves an expiring claim; whoever takes it over looks the attempt's dedupe
token up in the scheduler first and adopts what it finds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from launcher.core.errors import LauncherError, StateStoreError, SubmissionUnsettled
from launcher.launching.launch import resubmit
from launcher.backend.protocols import Handle
from launcher.launching.submission import SpecMemo, find_submission, job_ref, job_spec, note_unanswered, quiet_since
from launcher.launching.submit import attempt_handle, claimed_start, launch_alive, record_in_place, starts_backend
from launcher.plan.observed import observe_job
from launcher.state.store import ClaimLost, is_open
from launcher.core.status import JobState, Status, closes_job
from launcher.launching.polling import Poller
from launcher.launching.tracking import refresh
from launcher.recovery import burst, deadline, hang, notify, takeover
from launcher.launching import badnodes
from launcher.recovery import changes
from launcher.recovery.outcome import NO_HOOKS, Outcome, WatchHooks
from launcher.core import knobs
from launcher.state import marks as watch_marks
from launcher.state import wakeups
from launcher.state.claims import claimed
from launcher.state.db import StoreUnreachable
from launcher.state.watchers import Heartbeat
from launcher.recovery.decide import Action, Close, Facts, Note, on_ended, on_status, settled
from launcher.recovery.cancel import OVERTAKEN
from launcher.recovery.policy import reconcile_submitting
from launcher.recovery.progress import read_progress, record_progress
from launcher.recovery.state import RecoveryState
from launcher.backend.context import AppContext

# the rows a pass decides on are read this many at a time, right before they are decided: one read
# for many jobs, and a row never older than the decisions on the jobs before it in its chunk
DECIDE_CHUNK = 50


def hooks_of(app: AppContext, hooks: Optional[WatchHooks] = None) -> WatchHooks:
    """HOOKS, else the application's (``App.watch_hooks``: sweeps; every AppContext has them)."""
    return hooks if hooks is not None else app.watch_hooks


def cycle(app: AppContext, clock: Callable[[], float] = time.time, hooks: Optional[WatchHooks] = None,
          specs: Optional[SpecMemo] = None, poller: Optional[Poller] = None) -> list[Outcome]:
    """One pass over every open job: refresh (one status call per target) -> decide -> apply,
    for the jobs that changed or are due (``launcher.recovery.changes``; the others keep the
    outcome "running" of the last decision on them). SPECS: the parsed specs of the open jobs,
    kept from pass to pass by ``run`` (a new memo parses each job's spec once in this pass).
    POLLER: this watcher's part in electing one poller per target (``launcher.launching.polling``);
    None: every target is asked by this pass."""
    store = app.store
    hooks = hooks_of(app, hooks)
    specs = SpecMemo() if specs is None else specs
    rows, outcomes = _listed(app, clock, hooks)
    jobs = [j for j in rows if j.handle and is_open(j) and store.may_act(j)]
    outcomes += unreadable(store)  # rows whose meta cannot be read: reported, the others go on
    seen_before = watch_marks.load(store)
    now = clock()

    seen_now: dict = {}  # job id -> its fingerprint in this pass

    def recorded(row, st) -> bool:  # the store holds this status already: nothing to compare or write
        seen_now[row.job_id] = changes.fingerprint(row, st)
        return changes.unchanged(seen_before.get(row.job_id), seen_now[row.job_id], now)

    statuses = refresh(app, jobs, recorded=recorded, poller=poller)
    outcomes += hooks.judge(app, jobs)  # e.g. sweep early stopping: its stops are carried out below
    todo, passed_over = _to_decide(jobs, statuses, seen_now, seen_before, now, poller)
    decided, keep, forget = _decide_all(app, todo, clock, hooks, specs, seen_before, now)
    _mark(store, keep, forget)
    specs.keep_only(j.job_id for j in jobs)
    outcomes += passed_over + decided
    outcomes.extend(hooks.after(app, clock))  # e.g. sweep elements queued by the launcher: start as slots free
    outcomes += notify.step(app, jobs, clock)  # decided once under each job's claim, delivered off this thread
    return outcomes


def _listed(app: AppContext, clock, hooks: WatchHooks) -> tuple[list, list]:
    """(the rows this pass reads, the outcomes of settling its SUBMITTING rows and the rows whose
    cancel overtook their submission): one listing (``watch_rows``), again only when a row was
    settled."""
    store = app.store
    rows = store.watch_rows()
    unsettled = unsettled_in(store, rows)
    if not unsettled:
        return rows, []
    outcomes = reconcile(app, clock, jobs=unsettled, hooks=hooks)
    return store.watch_rows(), outcomes


def _to_decide(jobs: list, statuses: dict, seen_now: dict, seen_before: dict, now: float,
               poller: Optional[Poller]) -> tuple[list, list]:
    """([(job, its status, its fingerprint)] of the JOBS this pass decides on, in this watcher's
    order; the outcome "running" of the others, as the last decision on each said). A job whose
    status and row are what its mark recorded, and whose mark is not due, is passed over; with a
    POLLER, a job not in the poller's snapshot yet is left to the poller's next pass, and the
    watchers start deciding at points of their own (``changes.spread``)."""
    todo, passed_over = [], []
    for job in jobs:
        if poller is not None and job.job_id not in statuses:
            continue
        st = statuses.get(job.job_id)
        seen = seen_now[job.job_id] if job.job_id in seen_now else changes.fingerprint(job, st)
        if changes.unchanged(seen_before.get(job.job_id), seen, now):
            passed_over.append(Outcome(job.job_id, "running", st.state.value))
        else:
            todo.append((job, st, seen))
    if poller is not None:
        by_id = {t[0].job_id: t for t in todo}
        todo = [by_id[j] for j in changes.spread(list(by_id), poller.owner)]
    return todo, passed_over


def _decide_all(app: AppContext, todo: list, clock, hooks: WatchHooks, specs: SpecMemo, seen_before: dict,
                now: float) -> tuple[list, list, list]:
    """Decide on and act for each (job, status, fingerprint) of TODO, its row read DECIDE_CHUNK
    at a time (after the refresh wrote): (the outcomes, the marks to keep: a job found running
    with nothing to do, the marks to forget)."""
    store = app.store
    outcomes, keep, forget, progress_s = [], [], [], progress_every()
    fresh: dict = {}
    for i, (job, st, seen) in enumerate(todo):
        if i % DECIDE_CHUNK == 0:
            fresh = store.jobs_by_id(t[0].job_id for t in todo[i:i + DECIDE_CHUNK])
        if job.job_id not in fresh:  # gone, or its meta unreadable: the next listing says so
            continue
        o = _one_or_why_not(app, job.job_id, st, clock, hooks, specs, fresh[job.job_id])
        if o is not None:
            outcomes.append(o)
        if seen is not None and o is not None and o.action == "running" and not _every_pass(job, st, specs):
            keep.append((job.job_id, seen, changes.due(job, now, progress_s, changes.REVISIT_S)))
        elif job.job_id in seen_before:
            forget.append(job.job_id)
    return outcomes, keep, forget


def _one_or_why_not(app: AppContext, job_id: str, st, clock, hooks: WatchHooks, specs: SpecMemo,
                    row) -> Optional[Outcome]:
    """``_one``, with what stopped it as the outcome: another watcher's claim, an earlier try of
    the attempt that may still show (looked at next pass), or an error (recorded as an event)."""
    try:
        return _one(app, job_id, st, clock, hooks, specs, row=row)
    except ClaimLost as e:
        return Outcome(job_id, "claimed", str(e))
    except SubmissionUnsettled as e:
        return Outcome(job_id, "waiting", str(e))
    except LauncherError as e:
        app.store.record_event(job_id, "watch_error", error=str(e))
        return Outcome(job_id, "control_plane", str(e))


def progress_every() -> float:
    """Seconds between two reads of a running job's checkpoint root when nothing else about it
    changes ($LAUNCHER_PROGRESS_EVERY, default ``changes.PROGRESS_EVERY_S``)."""
    return knobs.number("LAUNCHER_PROGRESS_EVERY", changes.PROGRESS_EVERY_S, positive=True)


def _every_pass(job, st, specs: SpecMemo) -> bool:
    """Whether JOB is decided on at every pass, changed or not (``changes.every_pass``); a job
    whose spec cannot be read is (its decision says why, every pass)."""
    try:
        spec = specs.spec(job)
    except LauncherError:
        return True
    return changes.every_pass(RecoveryState.load(job.meta), spec, st)


def _mark(store, keep: list, forget: list) -> None:
    """Store this pass's marks. They are advice: a mark that cannot be written costs the next
    pass one more decision per job, never a missed one; an unreachable store is the loop's."""
    try:
        watch_marks.save(store, keep, forget)
    except StoreUnreachable:
        raise
    except StateStoreError:
        pass


def _submitting(job) -> bool:
    return is_open(job) and not job.handle and job.state == "SUBMITTING"


def unreadable(store) -> list[Outcome]:
    """An outcome for each open job the last listing could not read (its meta is not JSON),
    and a watch_error event for it, recorded once (not again while its latest event says the
    same): the job is left as it is for a person to look at."""
    out = []
    for job_id, why in sorted(store.unreadable_open().items()):
        error = f"not watched: {why}"
        last = store.last_event(job_id) or {}
        if (last.get("kind"), last.get("error")) != ("watch_error", error):
            store.record_event(job_id, "watch_error", error=error)
        out.append(Outcome(job_id, "unreadable", why))
    return out


# ---- SUBMITTING rows
def submitting_jobs(store) -> list:
    return [j for j in store.open_jobs() if not j.handle and j.state == "SUBMITTING"]


def overtaken(job) -> bool:
    """Whether JOB was cancelled while its launch was still under way, and what that launch
    submitted is not settled yet (``launcher.recovery.cancel.OVERTAKEN``)."""
    return job.state == "CANCELLED" and bool(job.meta.get(OVERTAKEN))


def unsettled_jobs(store) -> list:
    """SUBMITTING rows and rows whose cancel overtook their launch, from one listing."""
    return unsettled_in(store, store.watch_rows())


def unsettled_in(store, rows) -> list:
    """The ROWS (``watch_rows``) this role reconciles: SUBMITTING rows and rows whose cancel
    overtook their launch."""
    return [j for j in rows if store.may_act(j) and (_submitting(j) or overtaken(j))]


def reconcile(app: AppContext, clock: Callable[[], float] = time.time, jobs=None, record_errors: bool = True,
              hooks: Optional[WatchHooks] = None) -> list[Outcome]:
    """Resolve every SUBMITTING row through its dedupe token: adopt the scheduler's job, or
    close the row as FAILED once its grace has passed with no such job. A job cancelled while
    its launch was under way has that launch's job cancelled (``settle_overtaken``)."""
    hooks = hooks_of(app, hooks)
    out = []
    for job in unsettled_jobs(app.store) if jobs is None else jobs:
        try:
            o = (settle_overtaken(app, job.job_id, clock) if overtaken(job) else
                 reconcile_one(app, job.job_id, clock, hooks))
        except LauncherError as e:
            if record_errors:
                app.store.record_event(job.job_id, "watch_error", error=str(e))
            o = Outcome(job.job_id, "control_plane", str(e))
        if o is not None:
            out.append(o)
    return out


def reconcile_one(app: AppContext, job_id: str, clock: Callable[[], float] = time.time,
                  hooks: Optional[WatchHooks] = None) -> Optional[Outcome]:
    """Settle one SUBMITTING row under its claim (``launcher.recovery.policy.reconcile_submitting``):
    from the scheduler (its dedupe token), the launch's own state (alive, or over with an
    unknown outcome) and the launcher's traces of a start (the job folder's start claim, the
    checkpoint root's record of the attempt)."""
    store = app.store
    hooks = hooks_of(app, hooks)
    with claimed(store, job_id) as c:
        if c is None:
            return Outcome(job_id, "claimed", "another watcher is reconciling it")
        job = c.job
        if job.handle or job.state != "SUBMITTING" or not is_open(job):
            return None  # the launch (or another watcher) recorded it meanwhile
        attempt = RecoveryState.load(job.meta).attempt
        backend = app.backend(job.target)
        found, looked, error = look_up(app, backend, job, attempt)
        if found is None and looked:  # e.g. a queued sweep element's start, taken back into its queue
            o = hooks.unfound_submission(app, c, clock())
            if o is not None:
                return o
        now = clock()
        unknown = job.meta.get("submit_unknown") or {}
        if not looked:
            note_unanswered(store, job.job_id, now)
        trace = start_trace(app, job, attempt) if found is None and looked else ""
        r = reconcile_submitting(found is not None, now - job.created, looked=looked, lookup_error=error,
                                 launch_over=bool(unknown) or launch_alive(job.meta) is False,
                                 quiet_s=now - quiet_since(job.meta, unknown.get("at") or job.updated or job.created),
                                 trace=trace)
        if r.action == "wait":
            return Outcome(job_id, "waiting", r.reason)
        if r.action in ("adopt", "adopt_trace"):
            if found is None:  # its start record names the job: tracked by that id from now on
                found = Handle(backend.name, job.target, job_id, trace[3:], attempt,
                               extra={"job_dir": str(store.job_dir(job_id)), "found_by_trace": True})
            return adopt(store, c, attempt, found, r.reason)
        event = "submit_unknown_started" if r.action == "started" else "submit_lost"
        store.close_job(job_id, "FAILED", r.reason, owner=c.owner, event=event, detail={"reason": r.reason})
        return Outcome(job_id, "failed", r.reason)


def look_up(app: AppContext, backend, job, attempt: int) -> tuple:
    """(the scheduler's job carrying ATTEMPT of JOB's dedupe token or None, whether the lookup
    was answered, why not)."""
    try:
        return find_submission(backend, job_ref(app, job, attempt)), True, ""
    except LauncherError as e:
        return None, False, str(e)


def adopt(store, c, attempt: int, found: Handle, reason: str) -> Outcome:
    """Record FOUND as ATTEMPT of claimed job C (a SUBMITTING row settled: its reason says how)."""
    job = c.job
    store.record_attempt(job.job_id, attempt, job.target, found.to_json(), found.native_id, state="PENDING",
                         reason=reason, owner=c.owner)
    if job.reason != reason:  # e.g. "submission outcome unknown": settled now, status says how
        store.update_job(job.job_id, reason=reason)
    store.record_event(job.job_id, "adopted", attempt=attempt, native_id=found.native_id, reason=reason)
    return Outcome(job.job_id, "adopted", f"{job.target} id {found.native_id}")


def started_first(app: AppContext, c, st: Status) -> Optional[Note]:
    """Claimed job C's latest attempt ended without completing, but its start is held by another
    submission of that attempt: a watcher paused past its claim submitted it, and was stopped
    before it could settle it (``launcher.launching.submit.settle_unrecorded``), so the recorded
    submission stood down (``launcher.jobside.startclaim``) while that one ran. That one is the
    attempt: found by the dedupe token, it is recorded in place of the one that stood down."""
    last = c.attempts[-1]
    if st.state is JobState.COMPLETED:
        return None
    held = claimed_start(app.store, c.job, last.attempt, starts_backend(app, last.target), attempt_handle(last))
    if not held or held == last.native_id:
        return None
    found = find_attempt(app, c.job, last.target, last.attempt)
    if found is None or found.native_id != held:
        return None  # not at the scheduler any more: the attempt's end is decided on as it is
    reason = (f"attempt {last.attempt} started as {last.target} id {held}, a second submission of it whose "
              f"submitter was stopped before it could record it; id {last.native_id}, recorded first, stood "
              f"down ({st.reason or st.state.value})")
    record_in_place(app.store, c, last, found, reason)
    return Note("adopted", f"{last.target} id {held}: {reason}")


def find_attempt(app: AppContext, job, target: str, attempt: int) -> Optional[Handle]:
    """The scheduler's job carrying ATTEMPT of JOB's dedupe token on TARGET, or None (not
    there, or the lookup not answered). An element of a sweep is looked up as the sweep layer
    submits it again (``WatchHooks.resubmit_element``: its index of the array alone, named as
    the element, or its own job)."""
    if not job.meta.get("sweep"):
        return look_up(app, app.backend(target), job, attempt)[0]
    try:
        lookup, _ = hooks_of(app).resubmit_element(app, job, target, attempt)
        return lookup()
    except LauncherError:
        return None


def settle_overtaken(app: AppContext, job_id: str, clock: Callable[[], float] = time.time) -> Optional[Outcome]:
    """A job `cancel` closed while a submission of it was unsettled: its launch still under way
    (it cancels what it submits when it records it, but one that died after the scheduler
    accepted its job could not), or a launch or a watcher's resubmission that ended without
    knowing the scheduler's answer (a stalled controller may take the request in later). Under
    the job's claim: a job carrying that attempt's dedupe token is cancelled and
    recorded as that attempt (CANCELLED); the mark is cleared once the launch recorded its
    submission, or nothing was found the way ``reconcile_submitting`` concludes "nothing ran"."""
    store = app.store
    with claimed(store, job_id) as c:
        if c is None:
            return Outcome(job_id, "claimed", "another watcher is settling it")
        job = c.job
        mark = job.meta.get(OVERTAKEN) if job.state == "CANCELLED" else None
        if not mark:
            return None
        attempt = int(mark.get("attempt") or RecoveryState.load(job.meta).attempt)
        recorded = {a.attempt: a for a in c.attempts}.get(attempt)
        if recorded is not None and recorded.native_id:  # the launch recorded it (and cancelled it: cancel wins)
            store.patch_meta(job_id, **{OVERTAKEN: None})
            return None
        target = str(mark.get("target") or job.target)
        backend = app.backend(target)
        found, looked, error = look_up(app, backend, job, attempt)
        if found is not None:
            backend.cancel(found)  # a failure is a watch_error: tried again next cycle
            reason = ("cancelled: its submission, whose outcome was not known when the job was cancelled, reached "
                      "the scheduler after all")
            store.record_attempt(job_id, attempt, target, found.to_json(), found.native_id, state="CANCELLED",
                                 reason=reason, owner=c.owner)
            store.record_event(job_id, "cancelled_in_flight", attempt=attempt, native_id=found.native_id,
                               reason=reason)
            store.patch_meta(job_id, **{OVERTAKEN: None})
            return Outcome(job_id, "cancelled", f"{target} id {found.native_id}: {reason}")
        now = clock()
        unknown = job.meta.get("submit_unknown") or {}
        if not looked:
            note_unanswered(store, job.job_id, now)
        again = unknown.get("attempt") == attempt  # a watcher's resubmission of ATTEMPT, its outcome unknown
        r = reconcile_submitting(False, now - (float(unknown["at"]) if again else job.created), looked=looked,
                                 lookup_error=error, launch_over=bool(unknown) or launch_alive(job.meta) is False,
                                 quiet_s=now - quiet_since(job.meta, unknown.get("at"), mark.get("at") or job.updated))
        if r.action == "wait":
            return Outcome(job_id, "waiting", f"cancelled while its launch was under way; {r.reason}")
        store.patch_meta(job_id, **{OVERTAKEN: None})  # nothing of that launch runs
        return None


def start_trace(app: AppContext, job, attempt: int) -> str:
    """What the launcher's own traces say of ATTEMPT of JOB having started: "id X" (its start
    was claimed by job X in its job folder), "started" (its checkpoint root records a start
    of that attempt), or "" (no trace)."""
    held = claimed_start(app.store, job, attempt, starts_backend(app, job.target))
    if held:
        return f"id {held}"
    if job.ckpt_root:
        progress = read_progress(job.ckpt_root)
        if not progress.unknown and attempt in takeover.attempt_records(job.job_id, [attempt], progress.history):
            return "started"
    return ""


# ---- one open job
def _one(app: AppContext, job_id: str, st, clock, hooks: WatchHooks = NO_HOOKS,
         specs: Optional[SpecMemo] = None, row=None) -> Optional[Outcome]:
    """Decide on one open job whose status ST changed (or is due), and act. ROW: the job as read
    a moment ago (a pass reads the rows it decides on ``DECIDE_CHUNK`` at a time), else read now."""
    store = app.store
    row = store.get_job(job_id) if row is None else row
    if not is_open(row):  # the status just read closed it (COMPLETED, CANCELLED), or another watcher did
        if isinstance(st, Status) and st.state.value == row.state and closes_job(row.state):
            # its last progress (final step, each attempt's resume step): a pass reads a running
            # job's progress only every so often (launcher.recovery.changes), so once more at its end
            record_progress(app, row)
            return Outcome(job_id, "done", row.state.lower())
        return None
    first = hooks.act_first(app, row, st, clock)  # e.g. a sweep element to stop, or to burst out of its array
    if first is not None:
        return first
    specs = SpecMemo() if specs is None else specs  # each job's spec parsed once, whatever reads it
    if not hooks.owns_burst(app, row):
        spec = specs.spec(row)
        bursting = burst.step(app, row, spec, st, clock)
        if bursting is not None:
            return bursting
        moved = deadline.step(app, row, spec, st, clock)  # cost.deadline: keep it on schedule
        if moved is not None:
            return moved
    hung = hang.step(app, row, specs.spec(row), st, clock)  # recovery.hang: stacks, then the run is ended
    if hung is not None:
        return hung
    rs = RecoveryState.load(row.meta)
    seen = on_status(rs, st, clock())
    if isinstance(seen, Note):
        if isinstance(st, Status):  # spot that learns: an attempt that ended while the job kept going
            observe_job(store, row, st, spec=specs.spec(row))  # (a Slurm requeue in place) is evidence too
        return apply(app, row, seen)
    # the unit of work of a job that needs an action: the claim takes the status's recovery changes
    # and reads the view the decision needs (one transaction); the decision's writes and the claim's
    # release are one more; a resubmission adds its fence (the claim still holds) before the scheduler
    with claimed(store, job_id, wait=False, recovery=seen.state.changes_since(rs), view=True) as c:
        if c is None or (seen.lost is not None and not is_open(c.job)):  # another watcher is writing it
            return Outcome(job_id, "claimed", "another watcher is deciding on it")
        if isinstance(st, Status):
            # spot that learns: every ended attempt is evidence for the planner's interruption rates,
            # recorded before any resubmission ranks offers
            observe_job(store, c.job, st, spec=specs.spec(c.job), attempts=c.attempts, observed=c.observed)
        return apply(app, c.job, seen.lost or _decide_claimed(app, c, st, clock(), hooks, specs), claim=c,
                     specs=specs)


def _decide_claimed(app: AppContext, c, st: Status, now: float, hooks: WatchHooks = NO_HOOKS,
                    specs: Optional[SpecMemo] = None) -> Action:
    """Under the job's claim, on the job and attempts read when the claim was taken."""
    action = settled(c.job, c.attempts) or hooks.decide_ended(c.job) or started_first(app, c, st)
    if action is None:
        facts = gather(app, c, specs)
        action = on_ended(c.job, c.attempts, facts, st, now)
        if not isinstance(action, Note):  # the attempt is decided on: blame its nodes once, before a resubmission
            for kind, detail in badnodes.record(app, c.job, c.attempts[-1], st, facts.spec, now):
                app.store.record_event(c.job.job_id, kind, **detail)
    return action


def gather(app: AppContext, c, specs: Optional[SpecMemo] = None) -> Facts:
    """What the decision reads besides the claim's view C (the job, its attempts, the jobs on its
    checkpoint root): its spec (SPECS': parsed once per job) and the checkpoint root's progress
    (copied into the store on the way, in one transaction when it changed anything)."""
    job = c.job
    spec = specs.spec(job) if specs is not None else job_spec(job)
    progress = read_progress(job.ckpt_root)
    if progress.unknown:
        return Facts(spec, progress)
    record_progress(app, job, progress, attempts=c.attempts)
    return Facts(spec, progress, tuple((j.job_id, j.created) for j in c.sharing))


def apply(app: AppContext, job, action: Action, claim=None, specs: Optional[SpecMemo] = None) -> Outcome:
    """Carry a decision out; a Close or Resubmit only under the job's CLAIM (a ``Claim``), which
    the decision's last write gives back in its own transaction."""
    store = app.store
    owner = claim.owner if claim is not None else None
    if isinstance(action, Note):
        if action.state is not None:
            store.save_recovery(job.job_id, action.state.changes_since(RecoveryState.load(job.meta)))
        if action.event is not None:
            store.record_event(job.job_id, action.event[0], **action.event[1])
        if action.progress:
            record_progress(app, job)
        return Outcome(job.job_id, action.action, action.reason)
    if isinstance(action, Close):
        store.close_job(job.job_id, action.state, action.reason, owner=owner, event=action.event,
                        detail=action.detail, release=claim is not None)
        if claim is not None:
            claim.released = True
        return Outcome(job.job_id, action.action, action.why)
    reason = action.decision.reason
    target = job.target  # a backend that fails over (ChoosesPlacement) does so within the target
    # the recovery state (its attempt counter) is recorded with the attempt, in one transaction
    handle = resubmit(app, job, target, action.attempt, reason, avoid=action.avoid, owner=owner,
                      spec=specs.spec(job) if specs is not None else None,
                      recovery=action.state.changes_since(RecoveryState.load(job.meta)), release=claim is not None)
    if claim is not None:
        claim.released = True
    return Outcome(job.job_id, "resubmitted", f"{reason} -> {target} id {handle.native_id}")


def run(app: AppContext, interval: float = 10.0, once: bool = False, clock=time.time, sleep=time.sleep, echo=print,
        max_cycles: Optional[int] = None, hooks: Optional[WatchHooks] = None, exit_when_idle: bool = False) -> None:
    """Passes every INTERVAL seconds, for ever (ONCE: one pass; EXIT_WHEN_IDLE: until no job is
    open and no notification is left to deliver). Each pass records the watcher's heartbeat
    (``launcher.state.watchers``): what `status` and `launch` read to warn when no watcher runs."""
    try:
        _run(app, interval, once, clock, sleep, echo, max_cycles, hooks, exit_when_idle=exit_when_idle,
             heartbeat=Heartbeat(interval, now=clock()))
    finally:
        notify.flush(app)  # deliveries under way get a few seconds; the rest wait in the outbox


@dataclass
class _Loop:
    """What the watch loop carries from pass to pass; each flag makes a line said once."""

    passes: int = 0
    down: bool = False  # the store could not be reached at the last try (said once per outage)
    idle: bool = False  # no job was open after the last pass (said once per idle stretch)
    unrecorded: bool = False  # the heartbeat could not be recorded (said once)


def _run(app: AppContext, interval, once, clock, sleep, echo, max_cycles, hooks, exit_when_idle: bool = False,
         heartbeat: Optional[Heartbeat] = None) -> None:
    clock = clock or time.time
    loop = _Loop()
    specs = SpecMemo()  # the open jobs' parsed specs, from pass to pass
    poller = None if once else Poller(interval)  # a one-off pass asks every target itself
    woken = None if once else wakeups.listener(app.store)  # PostgreSQL: a launch or a cancel ends the wait
    try:
        while True:
            try:
                started = clock()
                _pass(app, loop, started, clock, echo, hooks, specs, poller, heartbeat)
                if once or (max_cycles is not None and loop.passes >= max_cycles):
                    return
                # a cancelled job whose submission may still appear, notifications still to deliver: go on
                left = bool(app.store.open_jobs() or unsettled_jobs(app.store) or notify.pending(app))
            except StoreUnreachable as e:
                # a team's server restarted or down: what was in flight rolled back whole; the claims
                # decide again once it answers (each cycle opens a new connection). Said once per outage.
                if once:
                    raise
                if not loop.down:
                    echo(f"{e}: trying again every {max(interval, 1.0):g} s")
                loop.down = True
                sleep(max(interval, 1.0))
                continue
            if _ends_here(loop, left, interval, echo, exit_when_idle):
                return
            pause = pause_after(interval, clock() - started)
            if woken is None or sleep is not time.sleep:  # (a test's own sleep: it decides the waits)
                sleep(pause)
            else:
                woken.wait(pause)
    finally:
        if woken is not None:
            woken.close()


def _pass(app: AppContext, loop: _Loop, started: float, clock, echo, hooks, specs: SpecMemo, poller,
          heartbeat: Optional[Heartbeat]) -> None:
    """One pass (begun at STARTED), its outcomes worth reading said to ECHO, then the heartbeat."""
    for o in cycle(app, clock, hooks, specs=specs, poller=poller):
        if o.action not in ("running", "claimed"):  # claimed: another watcher is on it
            echo(f"{o.job_id}: {o.action}" + (f" ({o.reason})" if o.reason else ""))
    loop.passes += 1
    if heartbeat is not None:
        loop.unrecorded = _beat(app, heartbeat, started, clock(), echo, loop.unrecorded)


def _ends_here(loop: _Loop, left: bool, interval: float, echo, exit_when_idle: bool) -> bool:
    """What the loop says after a pass that reached the store (its return, the last job closed),
    and whether it ends: no job LEFT and EXIT_WHEN_IDLE."""
    if loop.down:
        echo("the state store answers again")
        loop.down = False
    if not left and exit_when_idle:
        echo("no open jobs left")
        return True
    if not left and not loop.idle:  # said once each time the last job closes; the loop goes on
        echo(f"no open jobs left: still watching for new ones every {interval:g} s")
    loop.idle = not left
    return False


def pause_after(interval: float, pass_s: float) -> float:
    """Pure: the wait after a pass that took PASS_S, so that a pass starts every INTERVAL seconds
    whatever a pass costs (how long a job goes unobserved is bounded by the interval, not by the
    interval plus a pass); a pass longer than the interval is followed by a short breath (a tenth
    of the interval, at most 1 s) rather than none."""
    return max(interval - max(pass_s, 0.0), min(1.0, interval / 10.0))


def _beat(app: AppContext, heartbeat: Heartbeat, started: float, now: float, echo, unrecorded: bool) -> bool:
    """Record this pass in the heartbeat; True while it cannot be recorded (said once, then the
    watcher goes on: a heartbeat is advice to `status`, never a reason to stop recovering). An
    unreachable store is the loop's to wait out."""
    try:
        heartbeat.beat(app.store, started, now)
    except StoreUnreachable:
        raise
    except StateStoreError as e:  # (either engine's: launcher.state.connection)
        if not unrecorded:
            echo(f"warning: this watcher's heartbeat was not recorded ({e}); it goes on watching")
        return True
    return False
