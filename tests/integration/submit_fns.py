"""Functions the submit tests send to jobs (pickled by value: see ``by_value``)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def add(a, b):
    return a + b


def square(x):
    return {"x": x, "square": x * x, "pid": os.getpid()}


class Refused(ValueError):
    pass


def boom(x):
    inner_helper_that_raises(x)


def inner_helper_that_raises(x):
    raise Refused(f"refused {x}")


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def count_to(n, out, hold):
    """Commits a checkpoint per step through launcher.jobside, resuming after the last
    committed one; records its pid per start so a test can kill it."""
    from launcher.jobside import resume_step, save

    start = resume_step() + 1
    attempt = os.environ["LAUNCHER_ATTEMPT"]
    Path(out, f"pid-{attempt}").write_text(str(os.getpid()))
    for step in range(start, n):
        time.sleep(hold)
        with save(step) as d:
            Path(d, "state.txt").write_text(str(step))
    return {"first": start, "last": n - 1, "attempt": int(attempt)}
