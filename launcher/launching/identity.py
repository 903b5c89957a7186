"""Run identity: what a launch continues, and the seed it runs with.

A spec with a checkpoint root names a *run*: launching it again resumes the latest
committed checkpoint under that root (the job-side helper decides at every start of
the job). ``launch`` and ``render`` say so before anything is submitted: which run wrote
that checkpoint (COMMIT.json's ``run``, else the job id its generation recorded), what
state that run is in (this state store), and which step; a run that had already
finished is called out, with ``--fresh`` as the way to start over.

``--fresh`` deletes nothing: the job is submitted with ``LAUNCHER_FRESH=1``, and its
first start takes a generation above every existing one that records it resumed from
nothing, so every older checkpoint becomes stale ("superseded by a fresh run"), kept on
disk and never resumed from (``launcher.checkpoint.attempts.start_generation``).

The seed follows the run (``launcher.provenance.seed``). ``plan_identity`` is the one
place both ``render`` and ``launch`` get it from, so what render shows is what runs
(a randomly drawn seed excepted: render says so).

Reading the root from here: s3:// roots always; POSIX roots for the local backend and
for a Slurm cluster whose login node is this host. A root on a cluster reached over SSH
or on a cloud VM is not readable from here: then the state store's most recent run with
the same root stands in, and the message says the job resolves its checkpoint itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from launcher.backend.protocols import Host, can
from launcher.checkpoint import latest, open_store, read_attempt, read_generations
from launcher.checkpoint.store import is_s3
from launcher.core.errors import LauncherError
from launcher.core.status import attempt_live
from launcher.provenance.seed import ENV, SeedChoice, decide_seed, parse_env_seed
from launcher.backend.context import AppContext
from launcher.provenance.record import load_record, read_run_json

@dataclass(frozen=True)
class Earlier:
    """The run a launch would continue: the one that wrote the checkpoint it resumes from."""

    run: Optional[str]              # its job id (None: a framework checkpoint with no run recorded)
    step: Optional[int]             # the step it would resume from (None: unknown from here)
    path: Optional[str]
    state: Optional[str] = None     # its state in this state store (None: not in this store)
    seed: Optional[int] = None      # the seed it ran with (None: not recorded)
    seed_from: Optional[str] = None
    from_root: bool = True          # False: the root was not readable; this is the store's last record


@dataclass(frozen=True)
class Identity:
    root: Optional[str]
    fresh: bool
    earlier: Optional[Earlier]      # None: nothing to resume (or no root)
    seed: SeedChoice
    unreadable: str = ""            # why the root could not be read from here ("" if it was)
    lines: tuple = field(default_factory=tuple)

    @property
    def resumes(self) -> bool:
        return self.earlier is not None and not self.fresh

    def event(self) -> dict:
        """What the job's "resumes" / "fresh" event records."""
        e = self.earlier
        out = {"root": self.root, "seed": self.seed.seed, "seed_source": self.seed.source}
        if e is not None:
            out.update(run=e.run, step=e.step, path=e.path, run_state=e.state, seen_in="checkpoint root"
                       if e.from_root else "state store")
        if self.unreadable:
            out["root_unreadable"] = self.unreadable
        if self.seed.warning:
            out["seed_warning"] = self.seed.warning
        return out


# ---------------------------------------------------------------- pure: the messages
def messages(root: Optional[str], fresh: bool, earlier: Optional[Earlier], seed: SeedChoice,
             unreadable: str = "", subject: str = "this launch") -> list:
    """The lines a launch (and render: SUBJECT "a launch now") prints about what it
    continues and its seed."""
    out = []
    e = earlier
    if root and unreadable:
        out.append(f"the checkpoint root {root} was not read ({unreadable}); the job resolves the checkpoint to "
                   f"resume from at its start")
    if fresh:
        if e is not None and e.from_root:
            out.append(f"--fresh: starting over from step 0; the checkpoints under {root} (the newest: step {e.step}, "
                       f"written by {_run(e)}) stay on disk and become stale (superseded by this fresh run), never "
                       f"resumed from")
        elif e is not None:
            out.append(f"--fresh: starting over from step 0; the checkpoints of {_run(e)} under {root} stay on disk "
                       f"and become stale (superseded by this fresh run)")
        elif root:
            out.append(f"--fresh: starting over from step 0 (no committed checkpoint under {root} to supersede)")
        else:
            out.append("--fresh: the spec has no checkpoint root: every launch starts from scratch anyway")
    elif e is not None:
        where = f" ({e.path})" if e.path else ""
        if e.from_root:
            out.append(f"{subject} resumes {_run(e)} from step {e.step}{where}, its latest committed checkpoint")
        else:
            seen = f"its last committed step seen here: {e.step}" if e.step is not None else \
                "no committed step of it seen here"
            out.append(f"{subject} resumes the latest committed checkpoint under the root, if there is one; the last "
                       f"run recorded here with this root is {_run(e)}, {seen}")
        if e.state == "COMPLETED":
            out.append(f"run {e.run} had already finished (COMPLETED): resuming it may train nothing. To start "
                       f"over from step 0 and keep the old checkpoints, launch again with --fresh")
        elif e.state and attempt_live(e.state):
            out.append(f"run {e.run} is still {e.state}: {subject} supersedes it (its later checkpoints are "
                       f"refused as a stale fork); cancel it with `launcher cancel {e.run}` if that is not intended")
    if seed.warning:
        out.append("warning: " + seed.warning)
    if out or seed.source != "random":  # a plain first launch with a drawn seed says nothing
        out.append(seed.describe(e.run if (e is not None and not fresh) else None, subject))
    return out


def _run(e: Earlier) -> str:
    if not e.run:
        return "a run with no recorded id"
    return f"run {e.run}" + (f" ({e.state})" if e.state else " (not in this state store)")


def decide(root, fresh, earlier, spec_seed, env_seed, unreadable="", draw=None,
           subject="this launch") -> Identity:
    """Pure: the seed and the messages for a launch."""
    resuming = earlier is not None and not fresh
    seed = decide_seed(spec_seed, env_seed, earlier.seed if earlier else None,
                       resumed_run=earlier.run if earlier else None, resuming=resuming, fresh=fresh, draw=draw)
    return Identity(root, fresh, earlier, seed, unreadable,
                    tuple(messages(root, fresh, earlier, seed, unreadable, subject)))


# ---------------------------------------------------------------- I/O: what the root and the store say
def plan_identity(app: AppContext, spec, target_name: str, fresh: bool = False, environ=None, exclude=(),
                  subject: str = "this launch", read_s3: bool = True) -> Identity:
    """Read the checkpoint root (where it is readable from here) and the state store, and
    decide. EXCLUDE: job ids that are not an earlier run (the launch's own). READ_S3=False
    (``render``, a fast path that never loads boto3 or touches the network): an s3://
    root is not read, the state store's last run with that root stands in."""
    root = spec.checkpoint.root
    earlier, unreadable = None, ""
    if root and is_s3(root) and not read_s3:
        earlier, unreadable = _from_store(app, root, exclude), "render does not read s3:// roots; launch does"
    elif root:
        earlier, unreadable = _look(app, target_name, root, exclude)
    return decide(root, fresh, earlier, spec.seed, parse_env_seed(environ), unreadable, subject=subject)


def root_readable_here(app: AppContext, target_name: str, root: str) -> str:
    """"" if ROOT can be read from this host for TARGET_NAME, else why not."""
    if is_s3(root):
        return ""
    backend = app.backend(target_name)
    runner = backend.runner if can(backend, Host) else None
    if runner is None:
        return f"a path on the {backend.name} target's own file system"
    if runner.where == "localhost":
        return ""  # jobs are submitted from this host (a login node): the root is a path here
    return f"a path on target {target_name}'s cluster, reached over SSH"


def _look(app: AppContext, target_name, root, exclude) -> tuple:
    why = root_readable_here(app, target_name, root)
    if not why:
        try:
            return _from_root(app, root, exclude), ""
        except Exception as e:  # noqa: BLE001 - unreadable now: the job decides at its start anyway
            why = f"{type(e).__name__}: {e}"
    return _from_store(app, root, exclude), why


def _from_root(app: AppContext, root, exclude) -> Optional[Earlier]:
    if not is_s3(root) and not os.path.isdir(root):
        return None  # nothing written yet
    store = open_store(root)
    gens = read_generations(store)
    found = latest(store, gens=gens)
    if found is None:
        return None
    run = (found.manifest or {}).get("run")
    if not run and found.generation is not None:
        run = (gens.record(found.generation) or {}).get("job_id")
    if run in exclude:
        return None
    state, seed, seed_from = _run_facts(app, run, root, store, found.generation)
    return Earlier(run, found.step, found.path, state, seed, seed_from, True)


def _from_store(app: AppContext, root, exclude) -> Optional[Earlier]:
    for row in app.store.list_jobs(limit=1000):
        if row.ckpt_root == root and row.job_id not in exclude:
            seed = row.meta.get("seed")
            return Earlier(row.job_id, row.last_step, None, row.state, None if seed is None else int(seed),
                           "state store" if seed is not None else None, False)
    return None


def _run_facts(app: AppContext, run, root, store, generation) -> tuple:
    """(state in this store, seed, where the seed was found) of RUN."""
    state = seed = seed_from = None
    row = _job_row(app, run) if run else None
    if row is not None:
        state = row.state
        if row.meta.get("seed") is not None:
            seed, seed_from = row.meta["seed"], "state store"
    if seed is None and run:
        seed, seed_from = _recorded_seed(app, run, root)
    if seed is None and generation is not None:
        try:
            raw = (read_attempt(store, generation) or {}).get("seed")
            if raw not in (None, ""):
                seed, seed_from = int(str(raw), 0), f"attempt record g{generation} under the root"
        except (ValueError, OSError):
            pass
    return state, (None if seed is None else int(seed)), seed_from


def _job_row(app: AppContext, job_id):
    try:
        row = app.store.get_job(job_id)
    except LauncherError:
        return None
    return row if row.job_id == job_id else None


def _recorded_seed(app: AppContext, run, root) -> tuple:
    """The seed in RUN's provenance: the state store's record, else RUN.json under ROOT."""
    try:
        doc = load_record(app.store, run)
        if doc and doc.get("seed") is not None:
            return int(doc["seed"]), "provenance record in the state store"
    except (ValueError, TypeError):
        pass
    try:
        doc, where = read_run_json(root, run)
        if doc and doc.get("seed") is not None:
            return int(doc["seed"]), where
    except (ValueError, TypeError, OSError):
        pass
    return None, None


__all__ = ["ENV", "Earlier", "Identity", "decide", "messages", "plan_identity", "root_readable_here"]
