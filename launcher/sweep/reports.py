"""Reading what a sweep's elements reported (``jobside.report``), within a time bound.

Every element's reports live under its own checkpoint root (``launcher.checkpoint.metrics``):
storage the launcher does not control. As for checkpoint progress
(``launcher.recovery.progress``), one element's hung NFS mount or silent S3 endpoint must never
stop ``launcher watch`` or ``launcher status``: the roots are read by a few daemon threads
against one deadline, and a root whose read has not finished is left out (with the reason)
and not read again until that read ends.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from launcher.checkpoint.metrics import read_metrics
from launcher.recovery.progress import default_timeout

WORKERS = 8  # reads at once: enough to hide one slow root, few enough for a 2-core login node

_inflight: set = set()  # roots whose read has not ended (maybe hung)
_lock = threading.Lock()


@dataclass(frozen=True)
class Read:
    reports: dict = field(default_factory=dict)  # index -> {step: {metric: value}}
    problems: dict = field(default_factory=dict)  # index -> why its reports are not known this time


def read_element_reports(roots: Mapping[int, str], timeout: Optional[float] = None,
                         reader: Optional[Callable[[str], dict]] = None) -> Read:
    """{index: reports} of every root in ROOTS (index -> checkpoint root) whose read finished
    within TIMEOUT seconds in all ($LAUNCHER_STORAGE_TIMEOUT or 20 s); the others in
    ``problems``. READER (a root -> {step: {metric: value}}) is for tests."""
    if not roots:
        return Read()
    reader = reader or _read_metrics
    timeout = default_timeout() if timeout is None else float(timeout)
    todo: queue.Queue = queue.Queue()
    box: dict = {}
    problems: dict = {}
    with _lock:
        for index, root in sorted(roots.items()):
            if root in _inflight:
                problems[index] = f"still waiting for an earlier read of {root} (storage hung?)"
            else:
                _inflight.add(root)
                todo.put((index, root))
    pending = todo.qsize()
    if pending:
        done = threading.Semaphore(0)
        for _ in range(min(WORKERS, pending)):
            threading.Thread(target=_work, args=(todo, box, reader, done), name="launcher-reports",
                             daemon=True).start()
        deadline = time.monotonic() + timeout
        for _ in range(pending):
            if not done.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
    reports = {}
    for index, root in sorted(roots.items()):
        if index in problems:
            continue
        got = box.get(index)
        if got is None:
            problems[index] = f"no answer from {root} within {timeout:g}s (hung NFS mount or S3 endpoint?)"
        elif isinstance(got, BaseException):
            problems[index] = f"cannot read the reports under {root}: {type(got).__name__}: {got}"
        else:
            reports[index] = got
    return Read(reports, problems)


def _work(todo: queue.Queue, box: dict, reader, done: threading.Semaphore) -> None:
    while True:
        try:
            index, root = todo.get_nowait()
        except queue.Empty:
            return
        try:
            box[index] = reader(root)
        except BaseException as e:  # reported as the result, never a silent thread death
            box[index] = e
        finally:
            with _lock:
                _inflight.discard(root)
            done.release()


def _read_metrics(root: str) -> dict:
    return read_metrics(root)


def latest(steps: Mapping[int, Mapping[str, float]]) -> tuple:
    """(latest step reported or None, {metric: its value at the latest step that carries it})."""
    values: dict = {}
    for s in sorted(steps, key=int):
        values.update(steps[s])
    last = max((int(s) for s in steps), default=None)
    return last, values
