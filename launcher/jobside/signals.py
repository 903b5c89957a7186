"""Preemption notices and standing down: the signals a job's program handles.

Stdlib only (see ``launcher.jobside``)."""

from __future__ import annotations

import os
import signal
import sys
import time

from launcher.jobside.heartbeat import auto_heartbeat

EXIT_PREEMPTED = 75  # the program saved a checkpoint on a preemption notice and wants a restart
EXIT_SUPERSEDED = 3  # a newer attempt of this job is running: this one is a zombie

# "at": when the first notice arrived (time.time()), recorded with the next save
PREEMPT = {"requested": False, "signum": None, "at": None, "installed": {}}


def stand_down(reason="", max_wait=None):
    """What a superseded attempt (a zombie) does once a commit was refused: stop writing.

    Where the scheduler requeues a job in place (its job script renders
    LAUNCHER_REQUEUE_CMD: Slurm), the live attempt is the *same* job restarted elsewhere,
    with the same job and step ids: a zombie that exits makes its srun and slurmstepd
    report that exit when the node reconnects, and slurmctld then ends the live run. So
    there it waits, writing nothing, until the scheduler cleans it up (at most
    LAUNCHER_STAND_DOWN_SECONDS, default one day). Elsewhere it exits with
    EXIT_SUPERSEDED (3)."""
    if reason:
        print("launcher-job: %s" % reason, file=sys.stderr, flush=True)
    if os.environ.get("LAUNCHER_REQUEUE_CMD"):
        limit = float(max_wait if max_wait is not None else os.environ.get("LAUNCHER_STAND_DOWN_SECONDS", 86400))
        print("launcher-job: superseded under %s: waiting to be cleaned up instead of exiting"
              % _scheduler_name(), file=sys.stderr, flush=True)
        deadline = time.monotonic() + limit
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
            try:
                signal.signal(sig, signal.SIG_IGN)  # notices no longer concern this attempt
            except (ValueError, OSError):
                pass
        while time.monotonic() < deadline:
            time.sleep(min(30.0, max(0.0, deadline - time.monotonic())))
    sys.exit(EXIT_SUPERSEDED)


def _scheduler_name():
    """The backend's name as its job script exports it, for messages ("slurm" -> "Slurm")."""
    name = os.environ.get("LAUNCHER_BACKEND") or "its scheduler"
    return name.capitalize() if name.islower() else name


def preempt_signals(spec=None):
    """Signal numbers from SPEC or $LAUNCHER_PREEMPT_SIGNAL ('USR1', 'SIGUSR2', '10',
    'USR1,TERM'); default SIGUSR1."""
    raw = spec if spec is not None else (os.environ.get("LAUNCHER_PREEMPT_SIGNAL") or "USR1")
    out = []
    for tok in str(raw).replace(",", " ").split():
        t = tok.strip().upper()
        if t.isdigit():
            out.append(int(t))
            continue
        if not t.startswith("SIG"):
            t = "SIG" + t
        sig = getattr(signal, t, None)
        if not isinstance(sig, int) or t.startswith("SIG_"):
            raise ValueError("unknown signal %r in LAUNCHER_PREEMPT_SIGNAL" % tok)
        out.append(int(sig))
    return out or [int(signal.SIGUSR1)]


def _on_preempt(signum, frame):
    PREEMPT["requested"] = True
    PREEMPT["signum"] = signum
    if PREEMPT["at"] is None:
        PREEMPT["at"] = time.time()
    prev = PREEMPT["installed"].get(signum)
    if callable(prev) and prev is not signal.default_int_handler:
        prev(signum, frame)


def install_preemption_handler(signals=None):
    """Turn the preemption signal(s) into a flag polled with preemption_requested().
    SIGNALS: list of numbers/names, default from $LAUNCHER_PREEMPT_SIGNAL (SIGUSR1).
    A handler installed before is still called. Returns the signal numbers."""
    if signals is None:
        nums = preempt_signals()
    else:
        nums = preempt_signals(" ".join(str(int(s)) if not isinstance(s, str) else s for s in signals))
    for n in nums:
        prev = signal.signal(n, _on_preempt)
        if prev is not _on_preempt:
            PREEMPT["installed"][n] = prev
    auto_heartbeat()
    return nums


def preemption_requested() -> bool:
    return bool(PREEMPT["requested"])


def clear_preemption() -> None:
    PREEMPT["requested"] = False
    PREEMPT["signum"] = None
    PREEMPT["at"] = None
