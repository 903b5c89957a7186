"""What a job reads from its environment: the root, its generation, what it resumes from.

Stdlib only (see ``launcher.jobside``)."""

from __future__ import annotations

import os

from launcher.checkpoint import CheckpointError, latest as _latest, open_store, read_generations

PROG = "launcher-job"

_STORES = {}


def store_for(root):
    """One store (so one S3 client and connection pool) per root for the process."""
    st = _STORES.get(root)
    if st is None:
        st = _STORES[root] = open_store(root)
    return st


def ckpt_root(root=None) -> str:
    root = root or os.environ.get("LAUNCHER_CKPT_ROOT", "")
    if not root:
        raise CheckpointError("no checkpoint root: set LAUNCHER_CKPT_ROOT (the launcher does) or pass root=")
    return root


def env_int(name):
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    try:
        return int(v)
    except ValueError:
        raise CheckpointError("%s=%r is not an integer" % (name, v))


GENERATION_ENV = "LAUNCHER_GENERATION"  # the checkpoint generation, exported by resume-env
ATTEMPT_ENV = "LAUNCHER_ATTEMPT"  # the launcher's attempt (plus Slurm's restarts in place)


def generation_env():
    """The generation this process's environment names, or None: $LAUNCHER_GENERATION (what
    resume-env exported at this start), else $LAUNCHER_ATTEMPT. The fallback serves a process
    started outside a launcher job script that sets only the attempt: in a job with a checkpoint
    root resume-env always exports the generation, which may differ from the attempt (another
    job's starts on a shared root, an in-job restart, ``--fresh``)."""
    g = env_int(GENERATION_ENV)
    return g if g is not None else env_int(ATTEMPT_ENV)


def generation(store=None) -> int:
    """This process's generation: ``generation_env()``, else the current one under ROOT."""
    g = generation_env()
    if g is not None:
        return g
    store = store or store_for(ckpt_root())
    return read_generations(store).generation


def resume_from() -> str:
    """$LAUNCHER_RESUME_FROM: the checkpoint to resume from, '' on a fresh start."""
    return os.environ.get("LAUNCHER_RESUME_FROM", "")


def resume_step() -> int:
    """$LAUNCHER_RESUME_STEP as an int; -1 on a fresh start."""
    v = env_int("LAUNCHER_RESUME_STEP")
    return -1 if v is None else v


def latest_committed(root=None, verify=False):
    """{"path","step","generation","state","reason"} of the newest committed checkpoint, or None."""
    e = _latest(store_for(ckpt_root(root)), verify=verify)
    return e.to_dict() if e else None
