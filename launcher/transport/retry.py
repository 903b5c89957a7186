"""Retrying transient transport failures, with exponential backoff and jitter.

Which failures are worth another try is the caller's policy, a function of the error
passed to ``retry``: ``retry_idempotent`` retries every TransientError (for idempotent
work only); a backend brings its own (the Slurm backend retries sbatch only where it
surely did not start: ``launcher_backends.slurm.retry``). The transport knows no
scheduler.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any, Callable, TypeVar

from launcher.core.errors import TransientError

log = logging.getLogger("launcher.ssh")  # the transport's one logger name

T = TypeVar("T")
RetryPolicy = Callable[[TransientError], bool]  # True: this error is worth another try


def every_transient_error(exc: TransientError) -> bool:
    return True


def retry(fn: Callable[[], T], *, policy: RetryPolicy = every_transient_error, attempts: int = 4,
          base_delay: float = 0.5, max_delay: float = 8.0, sleep: Callable[[float], Any] = time.sleep,
          what: str = "command", failed: str = "failed") -> T:
    """Call ``fn`` and call it again (at most ``attempts`` calls in all) on a TransientError
    that ``policy`` accepts. Other errors, errors the policy refuses and the last error
    are raised. ``failed`` words the log line ("squeue failed (...); retry 1/3 in 0.4s")."""
    for i in range(attempts):
        try:
            return fn()
        except TransientError as e:
            if not policy(e) or i == attempts - 1:
                raise
            delay = min(max_delay, base_delay * (2 ** i)) * (0.5 + random.random() / 2)
            log.info("%s %s (%s); retry %d/%d in %.1fs", what, failed, e, i + 1, attempts - 1, delay)
            sleep(delay)
    raise AssertionError("unreachable")


def retry_idempotent(fn: Callable[[], T], **backoff) -> T:
    """``retry`` with every TransientError retried. Only for idempotent work (squeue,
    scontrol show, mkdir -p, put_file, put_tree): a command whose connection died mid-way
    may have run. Other errors (host key, authentication, a failing command) are raised
    at once. ``backoff``: ``retry``'s attempts, base_delay, max_delay, sleep, what."""
    return retry(fn, policy=every_transient_error, **backoff)
