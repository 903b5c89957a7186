"""The second half of a Slurm submission (``SlurmBackend.start_submit``): waiting for sbatch
and turning what it printed into a Handle, all-or-nothing."""

from __future__ import annotations

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


def submitted(backend, request: Request, script: str, wait) -> Handle:
    """The Handle of the sbatch whose result WAIT gives; an id sbatch printed that cannot be
    used is cancelled before the error is raised. Where sbatch may have reached the controller
    (it timed out, or printed a timeout) and the dedupe token finds no job yet, the outcome is
    unknown (SubmitOutcomeUnknown), never "rejected": the job may run."""
    job = request.job
    try:
        r = wait()
    except TransientError as e:
        if not may_have_run(e):
            raise
        return _found_or_unknown(backend, request, f"sbatch did not answer ({e})")
    if isinstance(r, Handle):
        return r
    if r.returncode != 0:
        said = r.stderr.strip() or r.stdout.strip()
        if may_have_been_accepted(said):
            return _found_or_unknown(backend, request, f"sbatch exited {r.returncode}: {said.splitlines()[-1]}")
        raise SubmitError(f"sbatch rejected the script for {job.job_id} (exit {r.returncode}):\n{said}")
    native = r.stdout.strip().split(";")[0]
    try:
        if not native.isdigit():
            raise SubmitError(f"sbatch printed an unexpected job id {r.stdout!r}")
        return Handle(backend.name, backend.target.name, job.job_id, native, job.attempt,
                      extra={"job_dir": request.meta["job_dir"], "script": script,
                             "hourly_usd": request.meta.get("hourly_usd")})
    except BaseException:
        backend.cancel_native(native)
        raise


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
