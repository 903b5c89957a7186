"""Starting a generation (what every start of a job does, inside the job) and the
per-generation record ``ROOT/.launcher/attempts/g<G>.json``.

The record is advisory (a later report reads it): it is written with a plain overwrite,
by the process that started the generation and then by the process that commits::

    {"generation": G, "job_id": ..., "host": ..., "pid": ..., "started": ISO,
     "resume_step": N or -1, "resume_from": path or null, "resume_seconds": s,
     "scheduler": {"SLURM_JOB_ID": ..., "SLURM_RESTART_COUNT": ..., ...},
     "preempt_signal_at": ISO or null,
     "saves": [{"step", "start", "end", "seconds", "write_seconds", "commit_seconds",
                "bytes", "files", "committed", "preempt", "error"}]}
"""

from __future__ import annotations

import json
import os
import random
import socket
import time

from .contract import attempt_key, bump_generation, now_iso, read_generations
from .discovery import latest
from .errors import CheckpointError, Conflict

_SCHED_VARS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_JOB_NODELIST",
               "SKYPILOT_TASK_ID", "SKYPILOT_CLUSTER_INFO", "LAUNCHER_JOB_ID")


def read_attempt(store, generation: int):
    raw, _ = store.read(attempt_key(generation))
    if raw is None:
        return None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def write_attempt(store, generation: int, doc: dict) -> None:
    store.put(attempt_key(generation), (json.dumps(doc, indent=1) + "\n").encode())


def start_generation(store, job_id=None, hint=None, verify=False, tries: int = 50):
    """Resolve the latest committed checkpoint and start a new generation resuming from it,
    atomically with respect to other starts (compare-and-swap on GENERATIONS.json; the
    checkpoint is re-resolved on every retry so the recorded resume step is the one seen
    by the winning write).

    Returns (Generations after the bump, Entry or None, [Entry looked at on the way])."""
    t0 = time.monotonic()
    store.check_root(create=True)
    last = None
    for _ in range(max(1, tries)):
        gens = read_generations(store)
        log, seen = [], {}
        found = latest(store, verify=verify, gens=gens, log=log, seen=seen)
        try:
            new = bump_generation(store, gens, found, job_id=job_id, hint=hint,
                                  min_generation=seen.get("max_generation", -1) + 1)
        except Conflict as e:
            last = e
            time.sleep(random.uniform(0.01, 0.1))
            continue
        rec = {"generation": new.generation, "job_id": job_id, "host": socket.gethostname(),
               "pid": os.getpid(), "started": now_iso(),
               "resume_step": found.step if found else -1, "resume_from": found.path if found else None,
               "resume_seconds": round(time.monotonic() - t0, 6),
               "scheduler": {k: os.environ[k] for k in _SCHED_VARS if k in os.environ},
               "preempt_signal_at": None, "saves": []}
        try:
            write_attempt(store, new.generation, rec)
        except Exception:  # advisory only: never fail a start over it
            pass
        return new, found, log
    raise CheckpointError("%s: could not start a new generation: %d concurrent updates of GENERATIONS.json "
                          "(%s)" % (store.root, tries, last))
