"""Launching a spec: render, record SUBMITTING, submit, record what the scheduler said.

How the scheduler's answer becomes a record (a rejection removes the row, an unknown
outcome keeps it SUBMITTING for ``status``/``watch`` to settle by its dedupe token, a
resubmission is fenced by its claim) is the submission protocol, ``launcher.launching.submit``.
"""

from __future__ import annotations

import socket
import functools
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from launcher.backend.protocols import Handle, JobRef, Request
from launcher.backend.support import require_supported
from launcher.core.errors import LauncherError, SubmissionUnsettled, SubmitOutcomeUnknown
from launcher.launching.submission import (Launched, earlier_unsettled, excluded_nodes, facts_for, find_submission,
                                           job_ref, job_spec, new_job_ref, note_unanswered, stored_secrets,
                                           with_secrets)
from launcher.launching.submit import NewSubmission, fenced_submit, record_or_cancel, settle_unrecorded
from launcher.spec.model import JobSpec
from launcher.state.store import ClaimLost, new_job_id
from launcher.backend.context import AppContext
from launcher.launching.identity import plan_identity
from launcher.launching.targeting import queue_waits
from launcher.plan import deadline as dl, params_for
from launcher.plan.ranking import work_estimate
from launcher.plan.sources import gather_offers
from launcher.provenance.record import complete_launch, draft_launch, failed_writes, store_writes
from launcher.provenance.seed import with_run_env
from launcher.provenance.trackers import (META_KEY as TRACKERS_KEY, describe as describe_trackers, open_job as
                                          open_trackers, with_trackers)
from launcher.spec.secretenv import for_launch
from launcher.state.claims import claim_ttl, kept_alive

if TYPE_CHECKING:
    from launcher.launching.identity import Identity


def launch(app: AppContext, spec: JobSpec, spec_text: str, spec_path: Optional[str], target_name: str,
           job_id: Optional[str] = None, attempt: int = 1, fresh: bool = False, note=None) -> Launched:
    """Render, record and submit a new job. Before submitting, NOTE (a callable, e.g. a
    print to stderr) gets what this launch continues (``launcher.launching.identity``): which run
    and step it resumes, or that --fresh starts over, and the LAUNCHER_SEED it carries;
    the same goes into the job's events ("resumes" / "fresh")."""
    check_launch(app, spec, spec_path, target_name, note)
    # secret-looking env -> secrets: delivered like secrets, never in the state store or the script
    spec, spec_text = for_launch(spec, spec_text)
    backend = app.backend(target_name)
    who = identify_launch(app, spec, spec_path, target_name, job_id or new_job_id(spec.name), attempt, fresh)
    request = render_launch(app, backend, spec, target_name, who)  # render errors: nothing recorded yet
    if note:
        for line in who.lines():
            note(line)
    record_submitting(app.store, backend, spec, spec_text, spec_path, target_name, who)
    return submit_launch(app, backend, spec, spec_text, spec_path, target_name, who, request)


@dataclass(frozen=True)
class LaunchIdentity:
    """Who a new launch is: its job (id, attempt, seed), what it continues (``plan_identity``:
    the run and step it resumes, or that it starts over) and its trackers' runs."""
    job: JobRef
    ident: Identity
    fresh: bool
    trackers: dict

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def continues(self) -> bool:
        """Whether the job's events say what it continues ("resumes" / "fresh")."""
        return self.fresh or self.ident.resumes

    def lines(self) -> list:
        """What the launch tells its user before it submits."""
        return [*self.ident.lines, *(f"tracking: {t}" for t in describe_trackers(self.trackers))]


def check_launch(app: AppContext, spec: JobSpec, spec_path: Optional[str], target_name: str, note=None) -> None:
    """Refuse a launch that cannot go: a sweep (launched by ``launcher.sweep``), a field the
    target (or a burst target) cannot honour, a deadline that cannot be met (NOTE: how a
    deadline on this machine runs)."""
    if spec.sweep is not None:  # the caller dispatches: launcher.sweep.launch.launch_sweep launches a sweep
        raise LauncherError(f"{spec.name} is a sweep: launcher.sweep.launch.launch_sweep launches it "
                            "(launcher.api.facade.Launcher.launch picks the one that fits)")
    require_supported(app, spec, target_name, spec_path or "")  # also its burst targets
    if spec.cost.deadline is not None:
        check_deadline(app, spec, target_name, note=note)


def identify_launch(app: AppContext, spec: JobSpec, spec_path: Optional[str], target_name: str, job_id: str,
                    attempt: int, fresh: bool) -> LaunchIdentity:
    """The identity of a new launch of job JOB_ID: what it continues and the seed it carries
    (exported as LAUNCHER_SEED), its dedupe token, and its trackers' runs (the W&B id, the
    MLflow run, created now: every attempt gets the same, ``meta["trackers"]``)."""
    ident = plan_identity(app, spec, target_name, fresh=fresh, exclude=(job_id,))
    # the nodes quarantined on the target (docs/bad-nodes.md): the job is kept off them
    job = new_job_ref(app.store, job_id, attempt, seed=ident.seed.seed,
                      exclude_nodes=excluded_nodes(app, target_name, time.time()))
    return LaunchIdentity(job, ident, fresh, open_trackers(spec, job_id, spec_path))


def render_launch(app: AppContext, backend, spec: JobSpec, target_name: str, who: LaunchIdentity) -> Request:
    """The Request of the launch WHO: SPEC with its run's env (seed, fresh) and trackers."""
    return backend.render(with_trackers(with_run_env(spec, who.job.seed, who.fresh), who.trackers),
                          facts_for(app, spec, target_name), who.job)


def launch_meta(spec_path: Optional[str], who: LaunchIdentity) -> dict:
    """The new job's meta: where its spec's relative paths start, its seed, what it continues,
    its trackers, and which process launches it (the reconciliation asks whether it is alive)."""
    ident = who.ident
    meta = {"spec_base": os.path.dirname(spec_path) if spec_path else os.getcwd(), "seed": ident.seed.seed,
            "seed_source": ident.seed.source}
    if who.fresh:
        meta["fresh"] = True
    if ident.resumes:
        meta["resumes"] = {"run": ident.earlier.run, "step": ident.earlier.step}
    if who.trackers:
        meta[TRACKERS_KEY] = who.trackers
    meta["launch_by"] = launch_owner()
    return meta


def record_submitting(store, backend, spec: JobSpec, spec_text: str, spec_path: Optional[str], target_name: str,
                      who: LaunchIdentity) -> None:
    """The new job's row, SUBMITTING, made durable before the scheduler is called."""
    store.begin_job(who.job_id, spec.name, target_name, backend.name, spec_path, spec_text,
                    ckpt_root=spec.checkpoint.root, meta=launch_meta(spec_path, who))


def submit_launch(app: AppContext, backend, spec: JobSpec, spec_text: str, spec_path: Optional[str], target_name: str,
                  who: LaunchIdentity, request: Request) -> Launched:
    """Submit REQUEST by the submission protocol and record what it produced in ONE transaction:
    the attempt, its events, the provenance record. Provenance (advisory, never raises) is
    captured while the scheduler answers; ROOT/.launcher/runs/<job_id>/RUN.json is written once
    the native id is known, before the store's lock."""
    store, job_id, ident = app.store, who.job_id, who.ident
    attempt, seed = who.job.attempt, who.job.seed
    submission = NewSubmission(store, backend, request, [job_id], lambda: store.forget_job(job_id))
    handle, drafted = submission.run(functools.partial(
        draft_launch, app, job_id=job_id, spec=spec, spec_text=spec_text, spec_path=spec_path,
        target_name=target_name, request=request, seed=seed, seed_source=ident.seed.source,
        continues=ident.event() if who.continues else None, trackers=who.trackers))
    captured = complete_launch(app, drafted, spec, target_name, job_id, handle)
    events = [("submitted", {"target": target_name, "native_id": handle.native_id, "attempt": attempt})]
    if who.continues:
        events.append(("fresh" if who.fresh else "resumes", ident.event()))
    writes = store_writes(job_id, captured, seed)
    record = functools.partial(record_launched, store, job_id, attempt, target_name, handle, events, writes)
    if not record_or_cancel(store, backend, job_id, handle, lambda: submission.recorded(handle, record)):
        raise LauncherError(f"job {job_id} was cancelled while it was being launched: what the launch submitted "
                            f"({backend.name} id {handle.native_id}) was cancelled")
    return Launched(job_id, handle, request)


def check_deadline(app: AppContext, spec: JobSpec, target_name: str, now: Optional[float] = None, note=None) -> None:
    """Refuse a spec whose ``cost.deadline`` cannot be met even on its quickest guaranteed offer
    (on-demand, a scheduler's queue) among its targets (else TARGET_NAME): the work
    (``resources.expected_runtime``, else the time limit) plus a restart overhead plus the
    queue wait, against the time left. The message gives the numbers.

    TARGET_NAME on this machine (a ``local`` target) has no spot: the job runs there as the
    guaranteed offer when its start and work fit the time left (NOTE is told so, and that
    ``launcher watch`` does not move it), else it is refused with the numbers."""
    now = time.time() if now is None else now
    targets = list(spec.targets) or [target_name]
    asked = targets if target_name in targets else [*targets, target_name]
    got = gather_offers(spec, app.config, targets=asked, queue_waits=queue_waits(app, spec, asked))
    work_h, source = work_estimate(spec, params_for(spec))
    hours_left = (spec.cost.deadline_at(now) - now) / 3600.0
    here = [o for o in got.offers if o.target == target_name and o.this_machine]
    if here:
        why = dl.on_this_machine(work_h, hours_left, min(o.restart_hours for o in here))
        if why:
            raise LauncherError(f"cost.deadline cannot be met on {target_name}: {why} (work from {source}); "
                                f"give a later deadline (docs/deadline.md)")
        if note:
            note(f"deadline: {target_name} is this machine: no spot there, so the job runs on it as the "
                 f"guaranteed offer ({work_h:.3g} h of work, {hours_left:.3g} h left); launcher watch does "
                 f"not move it (the policy places jobs among spot, on-demand and queue targets: "
                 f"docs/deadline.md)")
        return
    pairs = [(d, o) for d, o in ((dl.offer_of(o, spec.resources.nodes), o) for o in got.offers
                                 if o.target in targets) if d is not None]
    if not pairs:
        local = sorted({o.target for o in got.offers if o.target in targets and o.this_machine})
        mine = (f"the spec's targets ({', '.join(local)}) run on this machine, which the policy does not place "
                f"{target_name} from" if local else "no target of the spec has a priced offer (spot, on-demand "
                "or a scheduler's queue)")
        raise LauncherError(f"cost.deadline cannot be used on {target_name}: {mine}; launch on "
                            f"{local[0] if local else 'one of them'}, leave cost.deadline out, or add "
                            f"{target_name} (or another cloud or batch-scheduler target) to targets (docs/deadline.md)")
    overhead_h = min((o.restart_hours for d, o in pairs if d.guaranteed), default=10 / 60)
    why = dl.refusal(work_h, hours_left, overhead_h, [d for d, _ in pairs])
    if why:
        raise LauncherError(f"cost.deadline cannot be met: {why} (work from {source}; targets "
                            f"{', '.join(targets)})")


def launch_owner() -> str:
    """host:pid of this launch (``launcher.recovery.watch.reconcile_one`` asks whether it lives)."""

    return f"{socket.gethostname()}:{os.getpid()}"


def record_launched(store, job_id: str, attempt: int, target_name: str, handle: Handle, events: list,
                    provenance) -> bool:
    """Record a submitted launch: its attempt, EVENTS and PROVENANCE (``StoreWrites``) in one
    transaction. Provenance never fails a launch: when that transaction fails, the launch is
    recorded again without the record, with a ``provenance_error`` event (a store that cannot
    record the launch at all raises). False when the job was cancelled meanwhile
    (``StateStore.record_submission``)."""
    args = (job_id, attempt, target_name, handle.to_json(), handle.native_id)
    try:
        recorded = store.record_submission(*args, events=events + list(provenance.events),
                                           provenance=provenance.record)
    except ClaimLost:
        raise
    except Exception as e:  # noqa: BLE001 - retried below without what may have caused it
        if provenance.record is None:
            raise
        provenance = failed_writes(job_id, f"{type(e).__name__}: {e}")
        recorded = store.record_submission(*args, events=events + list(provenance.events))
    provenance.warn()
    return recorded


def resubmit(app: AppContext, job_row, target_name: str, attempt: int, reason: str, avoid=(), owner=None,
             spec=None, recovery: Optional[dict] = None, release: bool = False) -> Handle:
    """Submit a further attempt of an existing job (recovery, burst), by the submission
    protocol (``launcher.launching.submit``).

    The caller holds the job's claim (``owner``): the dedupe token is looked up first, so an
    attempt an earlier (crashed) holder submitted is adopted, never submitted twice; the
    scheduler is called only while the claim still holds (the fence), and the attempt is
    recorded only while it is ours (a compare-and-swap on job, attempt and owner). While
    the lookup and the submission run, the claim is kept alive. A submission made by a
    holder whose claim lapsed meanwhile (it was paused) is settled by it: adopted when the
    new holder recorded it, else cancelled (``settle_unrecorded``); the ClaimLost is raised.
    SPEC: the job's parsed spec when the caller has it (a watcher's ``SpecMemo``), else parsed here.
    RECOVERY: the recovery state's changes that go with this attempt, recorded with it (and the
    job's reason, REASON) in the submission's own transaction. RELEASE: OWNER's claim is given
    back in that transaction too (the caller's last write under it)."""
    try:
        with (kept_alive(app.store, job_row.job_id, owner, claim_ttl()) if owner else nullcontext()):
            handle, found = _submit_again(app, job_row, target_name, attempt, avoid, owner, spec)
    except SubmitOutcomeUnknown as e:  # it may run: a cancel meanwhile goes on looking for it (recovery.cancel)
        app.store.patch_meta(job_row.job_id, submit_unknown={"at": time.time(), "reason": str(e), "attempt": attempt,
                                                                "target": target_name})
        raise
    try:
        app.store.record_submission(job_row.job_id, attempt, target_name, handle.to_json(), handle.native_id,
                                    state="PENDING", reason=reason, owner=owner, events=[(
                                        "resubmitted", {"target": target_name, "attempt": attempt,
                                                        "native_id": handle.native_id, "reason": reason,
                                                        "found_existing": found})],
                                    recovery=recovery, job_reason=reason if recovery is not None else None,
                                    release=release and owner is not None)
    except ClaimLost:
        if not found:  # ours alone: adopted by the new holder, or a second copy to cancel
            settle_unrecorded(app.store, app.backend(target_name), job_row.job_id, attempt, handle)
        raise
    return handle


def _submit_again(app: AppContext, job_row, target_name: str, attempt: int, avoid, owner, parsed=None) -> tuple:
    """(the Handle of JOB_ROW's attempt ATTEMPT, whether an earlier try of it was found by its
    dedupe token), under OWNER's claim (``fenced_submit``)."""
    store = app.store
    backend = app.backend(target_name)
    if job_row.meta.get("sweep"):  # one element of a sweep: resubmitted alone, by the sweep layer's hook
        # (``WatchHooks.resubmit_element``, handed over by the app context): launching never imports launcher.sweep
        lookup, submit = app.watch_hooks.resubmit_element(app, job_row, target_name, attempt)
    else:
        # the nodes quarantined on the target (docs/bad-nodes.md) now: this attempt is kept off them
        job = job_ref(app, job_row, attempt, avoid=avoid, exclude_nodes=excluded_nodes(app, target_name, time.time()))

        def lookup() -> Optional[Handle]:
            return find_submission(backend, job)

        def submit() -> Handle:
            spec = parsed if parsed is not None else job_spec(job_row)
            request = with_secrets(backend.render(spec, facts_for(app, spec, target_name), job),
                                   stored_secrets(job_row))
            return backend.submit(request)

    return fenced_submit(store, backend, job_row.job_id, owner, *_after_unknown(store, job_row, attempt, lookup, submit))


def _after_unknown(store, job_row, attempt: int, lookup: Callable, submit: Callable) -> tuple:
    """LOOKUP and SUBMIT of ATTEMPT of JOB_ROW, minding an earlier submission of that attempt
    whose outcome was unknown (``submit_unknown``): a lookup the scheduler does not answer is
    noted (the quiet time starts again when it answers), and the attempt is not submitted again
    while that submission may still show (``earlier_unsettled``: SubmissionUnsettled)."""
    unknown = job_row.meta.get("submit_unknown") or {}
    if unknown.get("attempt") != attempt:
        return lookup, submit

    def looked_up():
        try:
            return lookup()
        except LauncherError:
            note_unanswered(store, job_row.job_id, time.time())
            raise

    def submitted():
        why = earlier_unsettled(job_row.meta, attempt, time.time())
        if why:
            raise SubmissionUnsettled(f"job {job_row.job_id}: {why}")
        return submit()

    return looked_up, submitted
