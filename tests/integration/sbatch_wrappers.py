"""Wrapper ``sbatch`` commands put first on PATH (issue 28): each runs the real sbatch, so
Slurm accepts the job, and then misbehaves the way a real site's sbatch can, so the launcher
sees an outcome that is not a plain answer:

- ``signal``: sbatch killed by a signal after Slurm accepted the job (SIGSEGV, or SIGKILL);
- ``banner``: a login banner line (not UTF-8) before the id;
- ``empty``: an empty line instead of the id;
- ``twice``: the id twice;
- ``slow``: the id printed, then sbatch hangs past the target's command_timeout;
- ``lost``: the answer lost to a slow controller: Slurm accepted the job, but sbatch prints no
  id, only the time-out a slow slurmctld gives ("Socket timed out on send/recv operation",
  exit 1), as when the controller took the job and its answer never came back.
- ``late``: the request taken in late by a stalled controller: sbatch prints only that time-out
  and exits 1 at once, and the real sbatch runs SLEEP seconds later in the background, as when
  a stopped slurmctld runs again and takes in the request queued at its socket (seed 29303,
  schedule 28 of the fault schedules: no lookup right after the launch can find it).

MODE ``once``: only the first sbatch of a LAUNCHER_HOME misbehaves (a mkdir marker), the
others run as they are; ``every``: each one does. None of these is Slurm's refusal: the
launcher must keep the job SUBMITTING and find it by its dedupe token, never "rejected".

The fault schedules draw a wrapper for half their Slurm schedules (``drawn``: ``KINDS`` only,
so a seed's schedules stay what they were); ``$LAUNCHER_FAULT_SBATCH`` (``kind:mode[:signal]``,
e.g. ``lost:once``, or ``none``) overrides that draw for every Slurm schedule of a run
(``overridden``), so a schedule replays with a wrapper of one's choosing.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Optional

KINDS = ("signal", "banner", "empty", "twice")  # drawn by the fault schedules ("slow" costs a time-out)
ALL_KINDS = KINDS + ("slow", "lost", "late")  # what $LAUNCHER_FAULT_SBATCH may name
OVERRIDE = "LAUNCHER_FAULT_SBATCH"
# what sbatch says when slurmctld did not answer within MessageTimeout (the job may have been taken)
TIMED_OUT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
MODES = ("once", "every")

BODIES = {
    "signal": 'REAL "$@"\nkill -{sig} $$\n',
    "banner": "printf 'Willkommen auf dem Cluster \\374ber SSH \\377\\n'\nexec REAL \"$@\"\n",
    "empty": 'REAL "$@" >/dev/null\nrc=$?\necho\nexit $rc\n',
    "twice": 'out=$(REAL "$@")\nrc=$?\nprintf \'%s\\n%s\\n\' "$out" "$out"\nexit $rc\n',
    "slow": 'REAL "$@"\nexec sleep {sleep}\n',
    "lost": 'REAL "$@" >/dev/null 2>&1\necho "{timed_out}" >&2\nexit 1\n',
    "late": '( sleep {sleep}; REAL "$@" ) </dev/null >/dev/null 2>&1 &\necho "{timed_out}" >&2\nexit 1\n',
}


def real_sbatch(env: dict) -> str:
    found = shutil.which("sbatch", path=env.get("PATH"))
    if not found:
        raise RuntimeError("no sbatch on PATH: the wrappers run the real one")
    return found


def install(folder: Path, kind: str, env: dict, mode: str = "once", sig: str = "SEGV", sleep_s: float = 60) -> dict:
    """Write FOLDER/bin/sbatch (KIND, MODE) and give ENV with that folder first on PATH."""
    real = real_sbatch(env)
    bin_dir = Path(folder) / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    marker = Path(folder) / "sbatch-misbehaved"
    body = BODIES[kind].format(sig=sig, sleep=f"{sleep_s:g}", timed_out=TIMED_OUT).replace("REAL", f"'{real}'")
    gate = f"[ {mode} = every ] || mkdir '{marker}' 2>/dev/null || exec '{real}' \"$@\"\n"
    script = bin_dir / "sbatch"
    script.write_text("#!/bin/sh\n# a wrapper sbatch of tests/integration/sbatch_wrappers.py\n" + gate + body)
    script.chmod(0o755)
    return {**env, "PATH": f"{bin_dir}:{env.get('PATH', '')}"}


def misbehaved(folder: Path) -> bool:
    """Whether a ``once`` wrapper in FOLDER has misbehaved yet."""
    return (Path(folder) / "sbatch-misbehaved").exists()


def drawn(schedule, share: float = 0.5):
    """SCHEDULE with an sbatch wrapper drawn for it (in SHARE of the Slurm schedules), from
    its own stream (``<seed>:<index>:sbatch``): the schedule's other draws are unchanged, so a
    seed replays as before. ``$LAUNCHER_FAULT_SBATCH`` overrides the draw (``overridden``)."""
    if schedule.backend != "slurm":
        return schedule
    rng = random.Random(f"{schedule.seed}:{schedule.index}:sbatch")
    if rng.random() >= share:
        return overridden(schedule)
    kind = rng.choice(KINDS)
    mode = rng.choice(MODES)
    sig = rng.choice(("SEGV", "KILL", "TERM")) if kind == "signal" else ""
    return overridden(replace(schedule, sbatch=f"{kind}:{mode}" + (f":{sig}" if sig else "")))


def parse(spec: str) -> tuple:
    """``kind:mode[:signal]`` -> (kind, mode, signal); ValueError for anything else."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or parts[0] not in ALL_KINDS or parts[1] not in MODES:
        raise ValueError(f"an sbatch wrapper is kind:mode[:signal], kind one of {ALL_KINDS}, mode one of "
                         f"{MODES}: not {spec!r}")
    return parts[0], parts[1], (parts[2] if len(parts) == 3 else "")


def overridden(schedule, env: Optional[dict] = None):
    """SCHEDULE with the wrapper ``$LAUNCHER_FAULT_SBATCH`` names (``none``: without one) in place
    of the drawn one, on Slurm; unset, SCHEDULE as it is."""
    value = (os.environ if env is None else env).get(OVERRIDE, "").strip()
    if not value or schedule.backend != "slurm":
        return schedule
    if value == "none":
        return replace(schedule, sbatch=None)
    parse(value)
    return replace(schedule, sbatch=value)


def install_for(schedule, folder: Path, env: dict, cluster) -> dict:
    """ENV for a run of SCHEDULE: with its sbatch wrapper first on PATH when it has one (the
    netns cluster only: on a dockerized one sbatch runs on its login node)."""
    spec: Optional[str] = getattr(schedule, "sbatch", None)
    if not spec or cluster is None or getattr(cluster, "kind", "") == "docker":
        return env
    kind, mode, sig = parse(spec)
    return install(folder, kind, env, mode, sig=sig or "SEGV")

