"""The submission protocol: the one place where a call to the scheduler becomes a record.

Every submission (a launch, a sweep's array, a sweep element's start, a resubmission by
``watch`` or a burst) goes through here, and follows four rules:

1. **Durable first.** The row it will record onto (the job SUBMITTING, or the claimed job
   of a resubmission) exists before the scheduler is called, with the dedupe token the
   scheduler's job will carry.
2. **An outcome not known is recorded as unknown.** A submission that fails with a
   rejection the scheduler gave (``SubmitError`` and other plain ``LauncherError``s, or a
   transport error that proves the command never started) removes a launch's rows. One
   that timed out, was interrupted or whose process died leaves them SUBMITTING with their
   token (``SubmitOutcomeUnknown``: ``StateStore.mark_submit_unknown``); ``status``,
   ``watch`` and ``cancel`` settle them from what the scheduler has
   (``launcher.recovery.watch.reconcile_one``). "Nothing ran" is never concluded from a
   lookup that could not prove it.
3. **Fenced at the point of action.** A resubmission runs under the job's claim: right
   before the scheduler is called the claim must still hold for ``FENCE_S`` (a holder that
   was paused past its claim never submits), and the record is a compare-and-swap on (job,
   attempt, claim owner) (``StateStore.record_submission``). A submission made anyway by a
   holder whose claim lapsed meanwhile is settled by that holder (``settle_unrecorded``):
   adopted if the store recorded it (the new holder found it by its token), else cancelled.
   The job side is the last line: an attempt's start is claimed once (create-only, with its
   native id, ``launcher.jobside.startclaim``), so a duplicate that still starts stands down
   before running user code.
4. **Cancel wins.** A launch whose job was cancelled while it was under way cancels what
   it submitted instead of reopening the job.

The fault points of ``launcher.core.faults`` mark the steps, for the fault-injection tests.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
import os
import socket
import time
from typing import Callable, Optional

from launcher.backend.context import AppContext
from launcher.backend.protocols import Handle, RemoteStarts, Request, StartsSubmit, can
from launcher.core import faults
from launcher.core.errors import LauncherError, StateStoreError, SubmitOutcomeUnknown, TransientError
from launcher.jobside.startclaim import ELEMENT_START_FOLDER, claim_start, holder
from launcher.state.claims import claim_ttl, claimed
from launcher.state.store import AttemptTaken, ClaimLost, is_open
from launcher.transport.errors import may_have_run

FENCE_S = 10.0  # a claim that holds for less than this is not acted on: it may lapse mid-call
SETTLE_WAIT_S = 30.0  # how long a holder that lost its claim waits to take it back to settle
STORE_FAILURES = (StateStoreError, OSError)  # the state store failed (a server gone, a lock held)


def proves_not_submitted(exc: BaseException) -> bool:
    """Pure: whether EXC, raised by a submission, proves the scheduler never accepted it. Only
    a rejection (a ``LauncherError`` that is not transient: for Slurm, a ``SubmitError`` from
    ``launcher_backends.slurm.submitting.classify``, Slurm's explicit refusal) or a transport
    error that proves the command never started does; a timeout, an interrupt, a kill, a
    signal, output that is not one id or an unexpected error leaves the outcome unknown."""
    if isinstance(exc, SubmitOutcomeUnknown):
        return False
    if isinstance(exc, TransientError):
        return not may_have_run(exc)
    return isinstance(exc, LauncherError)


def why_unknown(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "the launch was interrupted while the scheduler was being called"
    return f"{type(exc).__name__}: {exc}"


class NewSubmission:
    """A launch's submission of REQUEST onto rows already recorded SUBMITTING (JOB_IDS; FORGET
    removes them). ``run(work)`` submits, running WORK (provenance capture) while the
    scheduler answers where the backend submits in two halves, and gives (Handle, WORK())."""

    def __init__(self, store, backend, request: Request, job_ids: list, forget: Callable[[], None]):
        self.store, self.backend, self.request = store, backend, request
        self.job_ids, self.forget = list(job_ids), forget

    def run(self, work: Callable = lambda: None) -> tuple:
        faults.point("between_lookup_and_submit")  # a new launch looks nothing up: its rows are new
        self._not_cancelled()
        if not can(self.backend, StartsSubmit):
            handle = self._settled(lambda: self.backend.submit(self.request))
            return handle, self._accepted(handle, lambda: self._points("during_submit") or work())
        pending = self._settled(lambda: self.backend.start_submit(self.request))
        try:
            faults.point("during_submit")
            done = work()
        except BaseException as e:
            # the launch is interrupted while the scheduler answers: its answer is still
            # waited for, so the rows say what happened (the interrupt is what the caller hears)
            try:
                handle = self._settled(pending.wait)
            except BaseException:  # noqa: BLE001 - settled by _settled; the interrupt wins
                pass
            else:
                self._unknown(e, handle)
            raise
        handle = self._settled(pending.wait)
        return handle, self._accepted(handle, lambda: done)

    def _not_cancelled(self) -> None:
        """A launch whose job was cancelled while it was paused before the scheduler call does
        not submit at all (cancel wins; ``record_or_cancel`` covers a cancel that comes later)."""
        row = self.store.get_job(self.job_ids[0])
        if row.state == "CANCELLED":
            raise LauncherError(f"job {row.job_id} was cancelled before it was submitted: nothing was submitted")

    @staticmethod
    def _points(*names) -> None:
        for name in names:
            faults.point(name)

    def _accepted(self, handle: Handle, then: Callable):
        """THEN() once the scheduler accepted HANDLE; an interrupt or a failure before the caller
        records it leaves the rows SUBMITTING, marked unknown with the id the scheduler gave."""
        try:
            done = then()
            faults.point("between_submit_and_record")
            return done
        except STORE_FAILURES as e:
            self._unknown(e, handle)
            raise SubmitOutcomeUnknown(not_recorded(f"job {self.job_ids[0]}", self.backend.name, handle, e)) from e
        except BaseException as e:
            self._unknown(e, handle)
            raise

    def _settled(self, call: Callable):
        """CALL(); a failure that proves nothing was submitted removes the rows, any other
        (a timeout, an interrupt) leaves them SUBMITTING, marked unknown."""
        try:
            return call()
        except BaseException as e:
            if proves_not_submitted(e):
                self.forget()
            else:
                self._unknown(e)
            raise

    def recorded(self, handle: Handle, record: Callable, what: str = ""):
        """RECORD() of HANDLE, which the scheduler accepted; a store that fails meanwhile (a
        server gone, a lock held too long, a disk full) leaves the rows SUBMITTING, and the
        error says what was submitted (WHAT, default the first job) and that ``status`` /
        ``watch`` settle it by its dedupe token, never that nothing was written."""
        try:
            return record()
        except STORE_FAILURES as e:
            self._unknown(e, handle)
            raise SubmitOutcomeUnknown(not_recorded(what or f"job {self.job_ids[0]}", self.backend.name,
                                                    handle, e)) from e

    def _unknown(self, exc: BaseException, handle: Optional[Handle] = None) -> None:
        why = why_unknown(exc)
        if handle is not None:
            why = f"{why}, after the scheduler accepted it as id {handle.native_id}"
        try:
            self.store.mark_submit_unknown(self.job_ids, why)
        except BaseException:  # noqa: BLE001 - the rows stay SUBMITTING either way
            pass


def not_recorded(what: str, backend_name: str, handle: Handle, exc: BaseException) -> str:
    """Pure: the message of a submission the scheduler accepted (HANDLE) that the state store
    could not record (EXC)."""
    said = " ".join(str(exc).replace("(nothing was written)", "").replace("; nothing was written", "").split())
    return (f"{what} was submitted to {handle.target} ({backend_name} id {handle.native_id}), but the state store "
            f"could not record it: {said.rstrip(' ;,')}. It stays SUBMITTING: once the store answers, `launcher "
            f"status` (or `launcher watch`) settles it by its dedupe token. Do not launch it again.")


def record_or_cancel(store, backend, job_id: str, handle: Handle, record: Callable[[], bool]) -> bool:
    """RECORD() (a ``record_submission``); when it says the job was cancelled meanwhile, the
    submission HANDLE is cancelled at once and its attempt marked so. True when recorded."""
    if record():
        return True
    cancel_in_flight(store, backend, job_id, handle)
    return False


def cancel_in_flight(store, backend, job_id: str, handle: Handle) -> None:
    """Cancel HANDLE, the submission of JOB_ID that was recorded after a ``cancel`` closed the
    job (cancel wins), and mark its attempt so; a failure is recorded and raised, saying what
    to run."""
    try:
        backend.cancel(handle)
        store.update_attempt(job_id, handle.attempt, state="CANCELLED",
                             reason="cancelled while it was being launched")
        store.record_event(job_id, "cancelled_in_flight", native_id=handle.native_id)
    except LauncherError as e:
        store.record_event(job_id, "cancel_failed", errors=[f"id {handle.native_id}: {e}"])
        raise LauncherError(f"job {job_id} was cancelled while it was being launched, and cancelling what the "
                            f"launch submitted ({backend.name} id {handle.native_id}) failed: {e}; "
                            f"run `launcher cancel {job_id}` again") from None


# ---- a resubmission under the job's claim
def fenced_submit(store, backend, job_id: str, owner: Optional[str], lookup: Callable[[], Optional[Handle]],
                  submit: Callable[[], Handle], fence_s: Optional[float] = None) -> tuple:
    """(Handle, found) of a further attempt of JOB_ID: LOOKUP() (the dedupe token) first, an
    attempt found there is adopted (found True); else, while OWNER's claim still holds for
    FENCE_S (default: ``FENCE_S``, or a third of the claim's TTL when that is shorter: the
    keep-alive renews it that often), SUBMIT(). A claim that may lapse mid-call is not acted
    on (ClaimLost)."""
    fence_s = min(FENCE_S, claim_ttl() / 3) if fence_s is None else fence_s

    faults.point("before_lookup")
    existing = lookup()
    if existing is not None:
        return existing, True
    faults.point("between_lookup_and_submit")
    if owner is not None:
        left = store.claim_left(job_id, owner)
        if left < fence_s:
            raise ClaimLost(f"job {job_id}: the claim of {owner} holds for {left:.0f}s only (it was paused or "
                            f"slow); not submitting (another watcher takes the job over)")
    handle = submit()
    faults.point("during_submit")
    faults.point("between_submit_and_record")
    return handle, False


def settle_unrecorded(store, backend, job_id: str, attempt: int, handle: Handle,
                      wait_s: float = SETTLE_WAIT_S, sleep=time.sleep) -> str:
    """HANDLE, attempt ATTEMPT of JOB_ID, was submitted under a claim that lapsed before it
    could be recorded. Under the job's claim (waited for up to WAIT_S): kept when the store
    recorded it (the new holder found it by its dedupe token: "adopted"), recorded when
    nobody recorded that attempt ("recorded"), else cancelled ("cancelled"). When the claim
    cannot be had, it is cancelled unless the attempt is recorded with its id ("cancelled"
    or "adopted"): a second copy of an attempt never runs on."""
    deadline = time.monotonic() + wait_s
    while True:
        with claimed(store, job_id, claim_ttl()) as c:
            if c is not None:
                recorded = {a.attempt: a for a in c.attempts}.get(attempt)
                if recorded is not None and recorded.native_id == handle.native_id:
                    return "adopted"
                if recorded is None and is_open(c.job):
                    store.record_submission(job_id, attempt, handle.target, handle.to_json(), handle.native_id,
                                            owner=c.owner, reason="recorded by its submitter after its claim "
                                            "lapsed", events=[("resubmitted", {
                                                "target": handle.target, "attempt": attempt,
                                                "native_id": handle.native_id, "late": True})])
                    return "recorded"
                latest = c.attempts[-1].attempt if c.attempts else None
                if recorded is not None and latest == attempt and is_open(c.job) and \
                        claim_start_for(store, c.job, attempt, recorded.native_id, backend, handle) == \
                        handle.native_id:
                    return _take_over(store, backend, c, recorded, handle)
                return _cancel_copy(store, backend, job_id, attempt, handle)
        if time.monotonic() >= deadline:
            recorded = {a.attempt: a for a in store.attempts(job_id)}.get(attempt)
            if recorded is not None and recorded.native_id == handle.native_id:
                return "adopted"
            held = claimed_start(store, store.get_job(job_id), attempt, backend, handle) if recorded is not None \
                else None
            if held is not None and held == handle.native_id:
                # it started first: the recorded copy stands down when it starts, and the watcher
                # deciding on its end adopts this one (``launcher.recovery.watch.started_first``)
                return "started first"
            return _cancel_copy(store, backend, job_id, attempt, handle)
        sleep(0.5)


def _take_over(store, backend, c, recorded, handle: Handle) -> str:
    """HANDLE, a second submission of RECORDED's attempt, started first (it holds the attempt's
    start claim): it is the attempt. Recorded in RECORDED's place under claim C, and RECORDED
    (which stands down when it starts, before any user code) is cancelled."""
    job_id, attempt = c.job.job_id, recorded.attempt
    reason = (f"attempt {attempt} started as {handle.target} id {handle.native_id}, a second submission of it "
              f"(its submitter's claim lapsed before it could record it); id {recorded.native_id}, recorded "
              f"first, stands down")
    try:
        record_in_place(store, c, recorded, handle, reason)
    except AttemptTaken:
        return _cancel_copy(store, backend, job_id, attempt, handle)
    try:
        backend.cancel(Handle.from_json(recorded.handle))
    except (LauncherError, ValueError, TypeError) as e:  # it stands down by itself when it starts
        store.record_event(job_id, "duplicate_cancel_failed", attempt=attempt, native_id=recorded.native_id,
                           error=str(e))
    else:
        store.record_event(job_id, "duplicate_cancelled", attempt=attempt, native_id=recorded.native_id,
                           reason="a second submission of the attempt started first")
    return "took over"


def record_in_place(store, c, recorded, handle: Handle, reason: str) -> None:
    """HANDLE, a submission of RECORDED's attempt that holds the attempt's start claim, recorded
    in RECORDED's place under claim C, with REASON (event ``adopted``, naming the id it
    replaces); AttemptTaken when the attempt is no longer recorded as RECORDED."""
    store.replace_attempt(c.job.job_id, recorded.attempt, recorded.native_id, handle.target, handle.to_json(),
                          handle.native_id, reason, owner=c.owner, events=[(
                              "adopted", {"attempt": recorded.attempt, "native_id": handle.native_id,
                                          "replaces": recorded.native_id, "reason": reason})])


def _cancel_copy(store, backend, job_id: str, attempt: int, handle: Handle) -> str:
    try:
        backend.cancel(handle)
    except LauncherError as e:
        store.record_event(job_id, "duplicate_cancel_failed", attempt=attempt, native_id=handle.native_id,
                           error=str(e))
        raise
    store.record_event(job_id, "duplicate_cancelled", attempt=attempt, native_id=handle.native_id,
                       reason="submitted under a claim that lapsed; the attempt is another submission's")
    return "cancelled"


# ---- the launcher's own traces of a start (the scheduler may have forgotten a finished job)
def start_folders(job_row, handle: Optional[Handle] = None) -> list:
    """The folders, named under the target's jobs folder (the first part of each is a job
    folder), where JOB_ROW's starts claim themselves (``launcher.jobside.startclaim``). With
    HANDLE, a submission of the attempt: the one folder it claims its start in. That is its job
    folder, or, for an element of a sweep submitted as an array task (``sweep_array``), its
    element folder in the folder of that submission (the sweep's array: ``<sweep
    id>/element-<i>``; the element submitted again alone, as an array of one: ``<job
    id>/element-<i>``). Without HANDLE: every folder a submission of it may use, the most
    specific first."""
    sweep = job_row.meta.get("sweep") or {}
    if sweep.get("index") is None:
        return [job_row.job_id]
    element = ELEMENT_START_FOLDER.format(index=int(sweep["index"]))
    if handle is not None:
        if handle.extra.get("sweep_array") is None:
            return [job_row.job_id]
        if handle.extra.get("job_dir"):
            return [f"{PurePosixPath(str(handle.extra['job_dir'])).name}/{element}"]
    mine = [f"{job_row.job_id}/{element}", job_row.job_id]
    return [mine[0], f"{sweep['id']}/{element}", mine[1]] if sweep.get("id") is not None else mine


def claim_start_for(store, job_row, attempt: int, native_id: str, backend=None,
                    handle: Optional[Handle] = None) -> Optional[str]:
    """Claim ATTEMPT's start of JOB_ROW for the submission NATIVE_ID, create-only as the job
    side does (``launcher.jobside.startclaim``), in the start folder of HANDLE (a submission of
    that attempt: ``start_folders``) when its job folder exists (an element folder is made in
    it: the job side claims there when it starts): on this machine, or through BACKEND where
    its target keeps them elsewhere (``RemoteStarts``). The id holding that start afterwards
    (NATIVE_ID when the claim was free or already its, another submission's id when that one
    started first), or None (no start folder reached). Before a second copy of an attempt is
    cancelled, the start is claimed for the recorded copy, so the one cancelled can no longer
    start user code between the look and the cancel."""
    held, remote = None, remote_starts(backend)
    for folder in start_folders(job_row, handle):
        if remote:
            who = _remote(lambda: backend.claim_start(folder, attempt, native_id))
        else:
            who = _claim_here(store, folder, attempt, native_id)
        if who is None:
            continue
        if who != native_id:
            return who
        held = who
    return held


def _claim_here(store, folder: str, attempt: int, native_id: str) -> Optional[str]:
    """``claim_start`` in FOLDER under this machine's jobs folder when its job folder exists."""
    jobs = Path(store.home) / "jobs"
    if not (jobs / folder.split("/", 1)[0]).is_dir():
        return None
    try:
        return claim_start(str(jobs / folder), attempt, native_id)[1]
    except OSError:
        return None


def claimed_start(store, job_row, attempt: int, backend=None, handle: Optional[Handle] = None) -> Optional[str]:
    """The native id that claimed ATTEMPT's start of JOB_ROW in its start folder (HANDLE's, a
    submission of the attempt; without one, the first of ``start_folders`` holding a claim),
    or None (no trace there: not started, or the folder could not be read). The folders are
    read on this machine, or through BACKEND where its target keeps them elsewhere
    (``RemoteStarts``)."""
    remote = remote_starts(backend)
    for folder in start_folders(job_row, handle):
        if remote:
            held = _remote(lambda: backend.start_holder(folder, attempt))
        else:
            try:
                held = holder(str(Path(store.home) / "jobs" / folder), attempt)
            except OSError:
                continue
        if held:
            return held
    return None


def attempt_handle(attempt_row) -> Optional[Handle]:
    """The Handle an attempt's row records, or None (none recorded, or not readable)."""
    try:
        return Handle.from_json(attempt_row.handle) if attempt_row.handle else None
    except (ValueError, TypeError, KeyError):
        return None


def remote_starts(backend) -> bool:
    """Whether BACKEND's target keeps its job folders, and so its start claims, off this machine."""
    return backend is not None and can(backend, RemoteStarts) and backend.starts_elsewhere()


def starts_backend(app: AppContext, target: str):
    """TARGET's backend where its start claims are read through it (``remote_starts``), else
    None: the start folders are this machine's (or the target is not configured any more)."""
    try:
        backend = app.backend(target)
    except LauncherError:
        return None
    return backend if remote_starts(backend) else None


def _remote(read: Callable[[], Optional[str]]) -> Optional[str]:
    try:
        return read()
    except LauncherError:  # the login node did not answer: no trace read (as a folder not found)
        return None


def launch_alive(meta: dict) -> Optional[bool]:
    """Whether the launch that wrote a SUBMITTING row (its ``launch_by``, host:pid) still runs:
    None when that cannot be told from here (another host, or an older row)."""

    by = str(meta.get("launch_by") or "")
    host, _, pid = by.rpartition(":")
    if not host or host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists (another user's process)
    return not zombie(int(pid))


def zombie(pid: int) -> bool:
    """Whether process PID has ended and only waits for its parent to reap it (Linux: state Z in
    /proc/PID/stat). A launch that ended so is over, though signal 0 still reaches its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[-1].split()
    return bool(fields) and fields[0] == "Z"
