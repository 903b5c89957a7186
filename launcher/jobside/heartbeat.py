"""The job's heartbeat: when a crashed node died, for ``launcher report``.

Stdlib only (see ``launcher.jobside``)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from launcher.checkpoint import META_DIR, open_store
from launcher.checkpoint.contract import now_iso
from launcher.jobside.env import env_int, generation_env
from launcher.jobside.stacks import install_stack_dump

_HEARTBEAT = {"thread": None}


def heartbeat_key(gen) -> str:
    return "%s/attempts/g%d.heartbeat" % (META_DIR, int(gen))


def start_heartbeat(root=None, interval=None):
    """Write ROOT/.launcher/attempts/g<G>.heartbeat ({"at": ISO, "interval": s, ...}) every
    INTERVAL seconds from a daemon thread, so ``launcher report`` can tell when a crashed
    node died (the scheduler notices only later; without it, that delay counts as lost
    work). INTERVAL: $LAUNCHER_HEARTBEAT_SECONDS, else 10 (POSIX root) or 30 (S3); 0 turns
    it off. Started once per process by restore(), save() and install_preemption_handler()
    inside a launcher job ($LAUNCHER_BACKEND set). Advisory: never raises. Returns the
    thread, or None."""
    if _HEARTBEAT["thread"] is not None:
        return _HEARTBEAT["thread"]
    try:
        root = root or os.environ.get("LAUNCHER_CKPT_ROOT", "")
        gen = generation_env()
        if not root or gen is None:
            return None
        store = open_store(root)  # its own store: its requests are not the writer's
        if interval is None:
            raw = os.environ.get("LAUNCHER_HEARTBEAT_SECONDS", "").strip()
            interval = float(raw) if raw else (10.0 if store.is_local else 30.0)
        if interval <= 0:
            return None
        t = _beat_thread(store, gen, interval)
        _HEARTBEAT["thread"] = t
        t.start()
        return t
    except Exception:
        return None


def _beat_thread(store, gen, interval):
    key = heartbeat_key(gen)
    # in-job restarts so far in this allocation (recovery.in_job: the job script reruns a failed step)
    base = {"generation": gen, "host": socket.gethostname(), "pid": os.getpid(), "interval": interval,
            "in_job_restarts": env_int("LAUNCHER_IN_JOB_RESTARTS") or 0}

    def beat():
        while True:
            try:
                store.put(key, (json.dumps(dict(base, at=now_iso())) + "\n").encode())
            except Exception:  # a missed beat only makes the crash time less precise
                pass
            time.sleep(interval)

    return threading.Thread(target=beat, name="launcher-heartbeat", daemon=True)


def auto_heartbeat():
    if os.environ.get("LAUNCHER_BACKEND"):
        if _HEARTBEAT["thread"] is None:
            start_heartbeat()
        install_stack_dump()  # a hung run's stacks, on the launcher's request (recovery.hang): once
