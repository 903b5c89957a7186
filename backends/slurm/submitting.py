"""The second half of a Slurm submission (``SlurmBackend.start_submit``): waiting for sbatch
and turning what it printed into a Handle, all-or-nothing."""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.backend.protocols import Handle, Request
from launcher.core.errors import SubmitError, SubmitOutcomeUnknown, TransientError
from launcher.transport.errors import may_have_run


class PendingSubmit:
    """A started sbatch: ``wait()`` once for its Handle (or the error ``submit`` raises).
    WAIT gives sbatch's Result (or a Handle found by the dedupe token)."""

    def __init__(self, backend, request: Request, script: str, wait):
        self._backend, self._request, self._script, self._wait = backend, request, script, wait

    def wait(self) -> Handle:
        return submitted(self._backend, self._request, self._script, self._wait)


def raiser(exc: BaseException):
    def again():
        raise exc
    return again


# What sbatch prints when its request may have reached slurmctld although it exited non-zero:
# the controller accepted the job and the answer was lost (a stalled or overloaded controller).
# "Unable to contact slurm controller" is among them: sbatch reports a receive that timed out
# with it too (seen in the fault schedules: slurmctld paused, the job accepted, sbatch said so).
MAY_HAVE_ACCEPTED = ("socket timed out", "timed out on send/recv", "zero bytes were transmitted",
                     "connection reset", "slurm_receive_msg", "communication connection failure",
                     "unable to contact slurm controller", "transport endpoint")


def may_have_been_accepted(stderr: str) -> bool:
    """Pure: whether sbatch's error text leaves open that the controller accepted the job."""
    text = (stderr or "").lower()
    return any(p in text for p in MAY_HAVE_ACCEPTED)


# Slurm's own refusal: sbatch's error() and fatal() lines, and its option parser's complaints.
REFUSAL = re.compile(r"^sbatch: (error|fatal): |^sbatch: (unrecognized|invalid) option", re.M)
# What `sbatch --parsable` prints on success: the job (or array) id, with ";cluster" on a federation.
ID_LINE = re.compile(r"^(\d+)(?:;[A-Za-z0-9_.-]+)?$")


@dataclass(frozen=True)
class Outcome:
    """What one sbatch call did: "accepted" (NATIVE_ID), "refused" (Slurm said no: nothing
    runs) or "unknown" (WHY: the job may run; settled by its dedupe token)."""

    kind: str
    native_id: str = ""
    why: str = ""


def classify(returncode: int, stdout: str, stderr: str) -> Outcome:
    """Pure: the one reading of an sbatch that ran. The only outcome that means "nothing ran"
    is Slurm's explicit refusal: a positive exit code below 128 with sbatch's error (or
    fatal) line, no id printed, and no sign the request reached the controller
    (``may_have_been_accepted``). Accepted is exit 0 with exactly one job id. Everything else
    is unknown: a signal (a negative code here, 128+N from a shell over SSH, -1 when SSH
    reports no status), exit 0 with output that is not one id (a banner, nothing, the id
    twice), or an exit code without Slurm's refusal."""
    lines = [ln.strip() for ln in (stdout or "").splitlines() if ln.strip()]
    ids = [m.group(1) for m in map(ID_LINE.match, lines) if m]
    said = (stderr or "").strip() or (stdout or "").strip()
    last = said.splitlines()[-1][:300] if said else "no output"
    if returncode == 0:
        if len(lines) == 1 and len(ids) == 1:
            return Outcome("accepted", ids[0])
        return Outcome("unknown", why=f"sbatch exited 0 but printed {_shown(stdout)}, not one job id")
    if returncode < 0 or returncode >= 128:
        return Outcome("unknown", why=_killed(returncode, stdout, last))
    return _failed(returncode, stderr, ids, said, last)


def _killed(returncode: int, stdout: str, last: str) -> str:
    """Why an sbatch that a signal ended (or that ended without an exit status: -1) may have run."""
    if returncode == -1:
        return f"sbatch ended without an exit status ({last})"
    sig = -returncode if returncode < 0 else returncode - 128
    return f"sbatch was killed by signal {sig} (exit {returncode}) after printing {_shown(stdout)}"


def _failed(returncode: int, stderr: str, ids: list, said: str, last: str) -> Outcome:
    """An sbatch that exited RETURNCODE (1-127): refused only on Slurm's own refusal, with no id
    printed (IDS) and no sign its request reached the controller; unknown otherwise."""
    if ids:
        return Outcome("unknown", why=f"sbatch exited {returncode} after printing a job id ({ids[0]}): {last}")
    if may_have_been_accepted(said):
        return Outcome("unknown", why=f"sbatch exited {returncode}: {last}")
    if REFUSAL.search(stderr or ""):
        return Outcome("refused", why=said)
    return Outcome("unknown", why=f"sbatch exited {returncode} without Slurm's refusal message: {last}")


def _shown(stdout: str) -> str:
    text = stdout or ""
    return "nothing" if not text.strip() else repr(text[:200])


def submitted(backend, request: Request, script: str, wait) -> Handle:
    """The Handle of the sbatch whose result WAIT gives, by ``classify``: a refusal raises
    SubmitError (nothing runs); any outcome that may have left the job accepted (a signal, a
    time-out, output that is not one id, a transport error after the command may have run)
    is looked up by the dedupe token, and a job not found (yet) is SubmitOutcomeUnknown,
    never "rejected": the job may run."""
    job = request.job
    try:
        r = wait()
    except TransientError as e:
        if not may_have_run(e):
            raise
        return _found_or_unknown(backend, request, f"sbatch did not answer ({e})")
    if isinstance(r, Handle):
        return r
    o = classify(r.returncode, r.stdout, r.stderr)
    if o.kind == "refused":
        raise SubmitError(f"sbatch rejected the script for {job.job_id} (exit {r.returncode}):\n{o.why}")
    if o.kind == "unknown":
        return _found_or_unknown(backend, request, o.why)
    return Handle(backend.name, backend.target.name, job.job_id, o.native_id, job.attempt,
                  extra={"job_dir": request.meta["job_dir"], "script": script,
                         "hourly_usd": request.meta.get("hourly_usd")})


def _found_or_unknown(backend, request: Request, what: str) -> Handle:
    """The job carrying REQUEST's dedupe token, else SubmitOutcomeUnknown: WHAT happened may
    have left the job accepted, and a lookup that finds nothing (or fails) right after a
    stalled controller proves nothing."""
    try:
        found = backend.find(request.job)
    except TransientError as e:
        found, what = None, f"{what}; the lookup by its dedupe token failed too ({e})"
    if found is not None:
        return found
    raise SubmitOutcomeUnknown(
        f"the outcome of submitting {request.job.job_id} on {backend.target.name} is unknown: {what}. "
        "Slurm may have accepted it; it stays SUBMITTING and `launcher status` (or `watch`) settles it "
        "by its dedupe token. Do not launch it again.")
