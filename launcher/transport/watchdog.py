"""One long-lived thread per process that kills child processes past their deadline.

``LocalRunner`` waits for a command with a blocking ``waitpid`` (Python's wait *with* a
timeout polls with growing sleeps, which a short command pays for on every call) and lets
this watchdog enforce the deadline: it kills a child still running when its deadline
passes and remembers that it did, so the caller reports a timeout exactly as before. The
thread starts on first use, sleeps until the earliest deadline, and serves every runner of
the process (never a thread per call).
"""

from __future__ import annotations

import os
import threading
import time


class Watchdog:
    def __init__(self):
        self._reset()
        if hasattr(os, "register_at_fork"):  # a forked child has no thread and must not inherit a held lock
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._deadlines: dict = {}  # Popen -> monotonic deadline
        self._killed: set = set()
        self._thread = None

    def watch(self, proc, timeout: float) -> None:
        """Kill PROC if it still runs TIMEOUT seconds from now (until ``unwatch``)."""
        with self._cond:
            deadline = time.monotonic() + timeout
            sooner = not self._deadlines or deadline < min(self._deadlines.values())
            self._deadlines[proc] = deadline
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="launcher-watchdog", daemon=True)
                self._thread.start()
            elif sooner:  # woken only when it must wake earlier: no thread switch per command
                self._cond.notify()

    def unwatch(self, proc) -> bool:
        """Stop watching PROC; True when the watchdog killed it for passing its deadline."""
        with self._cond:
            self._deadlines.pop(proc, None)
            if proc in self._killed:
                self._killed.discard(proc)
                return True
            return False

    def watching(self, proc) -> bool:
        with self._cond:
            return proc in self._deadlines

    def _run(self) -> None:
        cond = self._cond
        with cond:
            while True:
                now = time.monotonic()
                for proc, deadline in list(self._deadlines.items()):
                    if deadline <= now:
                        del self._deadlines[proc]
                        if proc.poll() is None:
                            self._killed.add(proc)
                            try:
                                proc.kill()
                            except OSError:  # exited meanwhile
                                pass
                cond.wait(min(self._deadlines.values()) - now if self._deadlines else None)


WATCHDOG = Watchdog()
