"""Which failures of a Slurm command over SSH are worth another try (the transport takes
the policy as a parameter and knows no Slurm).

sbatch must not run twice, so it is retried only where its command surely did not start
(the connection could not be made). Where it may have run, the error propagates and the
backend looks for its dedupe token in the queue before submitting again.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from launcher.transport.errors import may_have_run
from launcher.transport.retry import retry

T = TypeVar("T")


def surely_did_not_start(exc: BaseException) -> bool:
    return not may_have_run(exc)


def retry_unstarted(fn: Callable[[], T], **backoff) -> T:
    """Like retry_idempotent, for commands that must not run twice (sbatch): retries only
    errors whose command surely did not start; a ``may_have_run`` error propagates so the
    caller can look for its dedupe token before submitting again. ``backoff``: the
    transport's ``retry`` attempts, base_delay, max_delay, sleep, what."""
    return retry(fn, policy=surely_did_not_start, failed="could not start", **backoff)
