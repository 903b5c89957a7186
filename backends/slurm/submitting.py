"""The second half of a Slurm submission (``SlurmBackend.start_submit``): waiting for sbatch
and turning what it printed into a Handle, all-or-nothing."""

from __future__ import annotations

from launcher.backend.protocols import Handle, Request
from launcher.core.errors import SubmitError, TransientError


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


def submitted(backend, request: Request, script: str, wait) -> Handle:
    """The Handle of the sbatch whose result WAIT gives; an id sbatch printed that cannot be
    used is cancelled before the error is raised."""
    try:
        r = wait()
    except TransientError:
        # unclear whether sbatch ran: look for our dedupe token before anyone retries
        found = backend.find(request.job)
        if found:
            return found
        raise
    if isinstance(r, Handle):
        return r
    if r.returncode != 0:
        raise SubmitError(f"sbatch rejected the script for {request.job.job_id} (exit {r.returncode}):\n"
                          f"{r.stderr.strip() or r.stdout.strip()}")
    native = r.stdout.strip().split(";")[0]
    try:
        if not native.isdigit():
            raise SubmitError(f"sbatch printed an unexpected job id {r.stdout!r}")
        return Handle(backend.name, backend.target.name, request.job.job_id, native, request.job.attempt,
                      extra={"job_dir": request.meta["job_dir"], "script": script,
                             "hourly_usd": request.meta.get("hourly_usd")})
    except BaseException:
        backend.cancel_native(native)
        raise
