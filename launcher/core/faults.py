"""Named fault points on the submit and record path, for the fault-injection tests.

A fault point is a no-op unless ``$LAUNCHER_FAULTS`` names it. The variable holds
``point=action`` pairs separated by commas; the first call of a named point in a process
carries its action out (once; ``point=action*`` every time):

    pause        the process stops itself (SIGSTOP: every thread, the claim keep-alive
                 included) after writing ``<point> <pid>`` to ``$LAUNCHER_FAULTS_LOG`` (when
                 set); whoever runs the test continues it with SIGCONT
    kill         the process kills itself (SIGKILL)
    interrupt    KeyboardInterrupt, as Ctrl-C would raise it
    sleep:S      sleep S seconds (its threads keep running)

The points, in the order a submission passes them (``launcher.launching.submit``):

    before_lookup            the claim is held; the dedupe lookup has not run
    between_lookup_and_submit  the lookup found nothing; the scheduler was not called
    during_submit            the scheduler was called (its answer not read yet)
    between_submit_and_record  the scheduler answered; the state store was not written
    during_record            inside the store's transaction that records the attempt
"""

from __future__ import annotations

import os
import signal
import time

POINTS = ("before_lookup", "between_lookup_and_submit", "during_submit", "between_submit_and_record",
          "during_record")
_fired: set = set()


def _actions(spec: str) -> dict:
    out = {}
    for item in spec.split(","):
        name, _, action = item.strip().partition("=")
        if name:
            out[name.strip()] = action.strip()
    return out


def point(name: str) -> None:
    """Carry out the action ``$LAUNCHER_FAULTS`` gives NAME, if any (see the module docstring)."""
    spec = os.environ.get("LAUNCHER_FAULTS")
    if not spec:
        return
    action = _actions(spec).get(name)
    if not action:
        return
    every = action.endswith("*")
    action = action.rstrip("*")
    if not every:
        if name in _fired:
            return
        _fired.add(name)
    log = os.environ.get("LAUNCHER_FAULTS_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{name} {os.getpid()} {action}\n")
    if action == "pause":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "interrupt":
        raise KeyboardInterrupt(f"fault point {name}")
    elif action.startswith("sleep:"):
        time.sleep(float(action.split(":", 1)[1]))
    else:
        raise ValueError(f"LAUNCHER_FAULTS: unknown action {action!r} for {name} "
                         "(expected pause, kill, interrupt or sleep:SECONDS)")
