"""Stack dumps on request: before the launcher ends a hung run (``recovery.hang``) it asks each
process of it for its Python stacks (docs/in-job-recovery.md#hangs).

``install_stack_dump`` registers ``faulthandler`` on SIGUSR2 (every thread's frames) writing to
``ROOT/.launcher/stacks/g<G>/<host>.<pid>.txt`` under a POSIX checkpoint root; the file, created
empty at once, also tells the launcher which processes to ask. It is not installed when SIGUSR2
already has a handler (the program's own, or the preemption signal: ``recovery.signal: USR2``),
nor for s3:// roots (the launcher could not read the file): there only ``py-spy`` dumps stacks.

Stdlib only (see ``launcher.jobside``)."""

from __future__ import annotations

import faulthandler
import os
import signal
import socket

from launcher.jobside.env import generation_env, store_for

STACK_SIGNAL = signal.SIGUSR2
STACKS_DIR = ".launcher/stacks"  # launcher.recovery.hangs.STACKS_DIR names the same folder
_STATE = {"file": None, "tried": False}


def stack_file_key(gen, host=None, pid=None) -> str:
    return "%s/g%d/%s.%d.txt" % (STACKS_DIR, int(gen), host or socket.gethostname(), pid or os.getpid())


def install_stack_dump(root=None):
    """Dump every thread's Python stack to this process's stack file on SIGUSR2 (see the
    module). Once per process; advisory: never raises. Returns the file's path, or None."""
    if _STATE["tried"]:
        return _STATE["file"].name if _STATE["file"] is not None else None
    _STATE["tried"] = True
    try:
        root = root or os.environ.get("LAUNCHER_CKPT_ROOT", "")
        gen = generation_env()
        if not root or gen is None or signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):
            return None
        if "USR2" in os.environ.get("LAUNCHER_PREEMPT_SIGNAL", "").upper():  # the notice, even if not handled yet
            return None
        store = store_for(root)
        if not store.is_local:
            return None
        path = store.local_path(stack_file_key(gen))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(path, "a")
        faulthandler.register(STACK_SIGNAL, file=f, all_threads=True, chain=False)
        _STATE["file"] = f
        return path
    except Exception:
        return None
