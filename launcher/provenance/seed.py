"""The seed a run gets as ``LAUNCHER_SEED``.

Chosen once per launch: the spec's ``seed`` field if the spec has one, else
``$LAUNCHER_SEED`` in the launching environment, else a random 31-bit integer. It is
recorded in the run's provenance and in ``jobs.meta["seed"]``, and every submission of
the job (Slurm requeues rerun the same script; resubmissions re-render from the state
store) exports the same value.

The seed reaches the job through the spec's ``env`` (a copy of the spec, never the
file): every backend already exports ``env`` quoted (sbatch, local script, SkyPilot
task ``envs``), and ``LAUNCHER_`` names are reserved, so a user's env cannot clash.
"""

from __future__ import annotations

import os
import secrets
from typing import Optional

from ..errors import LauncherError

ENV = "LAUNCHER_SEED"


def choose_seed(spec=None, environ=None) -> tuple[int, str]:
    """(seed, where it came from: "spec", "env" or "random")."""
    environ = os.environ if environ is None else environ
    fixed = getattr(spec, "seed", None) if spec is not None else None
    if fixed is not None:
        return int(fixed), "spec"
    raw = (environ.get(ENV) or "").strip()
    if raw:
        try:
            return int(raw, 0), "env"
        except ValueError:
            raise LauncherError(f"{ENV}={raw!r} is not an integer") from None
    return secrets.randbelow(2 ** 31), "random"


def with_seed(spec, seed: Optional[int]):
    """A copy of SPEC whose env exports LAUNCHER_SEED (SPEC itself is unchanged)."""
    if seed is None:
        return spec
    return spec.model_copy(update={"env": {**spec.env, ENV: str(int(seed))}})
